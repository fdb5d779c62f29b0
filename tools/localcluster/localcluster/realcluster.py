"""The real nodes of a local cluster, their host services, and the host changes they make, start to stop.

Start: the host changes go into a journal first (addresses, sysctls, iptables, mounts, cgroups, folders);
then CoreDNS and kube-proxy as host processes, and per node containerd (pulling from the cluster's registry,
into which the sandbox image is pushed first), the fake device plugin and the kubelet. Stop: every process
and every container process (found by cgroup, since a containerd shim outlives its containerd), then the
journal undone in reverse. A cluster-up that died
halfway left a journal behind: the next start on this host undoes it first.
"""

from __future__ import annotations

import os
import signal
import sys
import time
from collections.abc import Callable
from pathlib import Path

from localcluster import hostservices, images, netplan, processes, provisioner, publish, trainerenv
from localcluster.binaries import Binaries
from localcluster.kubeconfig import write_kubeconfig
from localcluster.hostchanges import HOST_ROOT, HostJournal, cgroup_pids, unmount_all
from localcluster.nodes import NodePoolConfig
from localcluster.realnodes import KUBELET_FIXED_PATHS, RUNTIME_FIXED_PATHS, RealNode

Launch = Callable[[str, list[str], dict[str, str] | None], None]
JOURNALS = HOST_ROOT / "clusters"
# Where pods find torch (hostPath, read-only): a fixed path, so examples/real/ works from any checkout.
TRAINER_ENV_HOST_PATH = HOST_ROOT / "trainer-env"


def journal_path(cluster: str) -> Path:
    return JOURNALS / cluster / "journal.json"


class RealNodeSet:
    def __init__(self, cluster: str, pool: NodePoolConfig, config_dir: Path, bins: Binaries):
        self.cluster, self.pool, self.config_dir, self.bins = cluster, pool, config_dir, bins
        host_dir = JOURNALS / cluster / "nodes"
        self.nodes = [RealNode(cluster, pool, i, config_dir / f"node-{i}", host_dir / str(i))
                      for i in range(pool.count)]
        self.identities = {n.name: hostservices.new_identity(f"system:node:{n.name}", "system:nodes")
                           for n in self.nodes}
        self.identities["kube-proxy"] = hostservices.new_identity(hostservices.KUBE_PROXY_USER)
        self.identities["coredns"] = hostservices.new_identity(hostservices.COREDNS_USER)

    # ---- host --------------------------------------------------------------------------------------------

    def prepare_host(self, marker_dir: Path) -> HostJournal:
        """Undo what a dead cluster left, then make (and journal) every host change the nodes need."""
        reclaim_stale_clusters()
        if journal_path(self.cluster).exists():
            raise RuntimeError(f"real-node cluster {self.cluster!r} is still running on this host")
        journal = HostJournal(journal_path(self.cluster))
        journal.record("owner", marker=str(marker_dir))
        journal.snapshot_sysctls()
        journal.snapshot_iptables()
        for address in (netplan.API_ADDRESS, netplan.DNS_ADDRESS, *(n.address for n in self.nodes)):
            journal.add_address(address)
        journal.set_sysctl("net/ipv4/ip_forward", "1")
        # Safety net: pods reach each other and this host, never anything beyond it.
        journal.add_iptables_rule("filter", "FORWARD", "-s", netplan.POD_RANGE, "!", "-d", netplan.POD_RANGE,
                                  "-j", "DROP")
        for path in (*KUBELET_FIXED_PATHS.values(), *RUNTIME_FIXED_PATHS):
            journal.make_dir(path)
        # Private, so the kubelets' own binds over these folders never propagate to the host or each other.
        for path in (Path("/var/lib/kubelet"), KUBELET_FIXED_PATHS["containers-log"]):
            journal.bind_mount(path, "private")
        journal.make_dir(TRAINER_ENV_HOST_PATH)
        journal.bind_readonly(trainerenv.ensure_trainer_env(), TRAINER_ENV_HOST_PATH)
        return journal

    # ---- processes ---------------------------------------------------------------------------------------

    def token_lines(self) -> list[str]:
        return [i.token_line() for i in self.identities.values()]

    @property
    def volumes_root(self) -> Path:
        """Where the `local-shared` StorageClass makes its volumes' folders."""
        return JOURNALS / self.cluster / "volumes"

    def start(self, journal: HostJournal, launch: Launch, server: str, ca: Path, client_ca: Path,
              apply: Callable[[list[dict]], None], admin_kubeconfig: Path, registry: str) -> None:
        self.config_dir.mkdir(parents=True, exist_ok=True)
        kc = {name: write_kubeconfig(self.kubeconfig_path(name), server, ca, ident.user, ident.token)
              for name, ident in self.identities.items()}
        apply([*hostservices.rbac_objects(), provisioner.storage_class()])
        journal.make_dir(self.volumes_root)
        launch("provisioner", [sys.executable, "-m", "localcluster.provisioner", "--kubeconfig", str(admin_kubeconfig),
                               "--root", str(self.volumes_root)], None)
        launch("coredns", hostservices.coredns_args(self.bins, self.config_dir, kc["coredns"]), None)
        launch("kube-proxy", hostservices.kube_proxy_args(self.bins, self.config_dir, kc["kube-proxy"],
                                                          self.nodes[0].name), None)
        # The sandbox image every pod needs, pulled by containerd on a node's first pod (0.8 MB). The images
        # of the operator and the trainers are not: `make push` puts them there, as an admin would.
        pause = publish.image_reference(registry, images.PAUSE)
        publish.push_image(images.build_images((images.PAUSE,))[images.PAUSE], pause)
        for node in self.nodes:
            node.prepare(journal, self.bins, client_ca, registry, pause)
            self._launch_containerd(node, launch)
        for node in self.nodes:
            node.wait_containerd()
            self._launch_kubelet(node, launch)

    def kubeconfig_path(self, identity: str) -> Path:
        return self.config_dir / f"{identity}.kubeconfig"

    def _launch_containerd(self, node: RealNode, launch: Launch) -> None:
        # containerd finds its shim and runc on PATH.
        env = {**os.environ, "PATH": f"{self.bins.containerd.parent}:{self.bins.runc.parent}:{os.environ['PATH']}"}
        launch(node_process(node, "containerd"), node.containerd_args(self.bins), env)

    def _launch_kubelet(self, node: RealNode, launch: Launch) -> None:
        launch(node_process(node, "device-plugin"), node.device_plugin_args(self.bins), None)
        launch(node_process(node, "kubelet"), node.kubelet_args(self.bins, self.kubeconfig_path(node.name)), None)

    # ---- one node's machine dying and coming back ---------------------------------------------------------

    def kill_node(self, index: int, pids: dict[str, int], marker: str) -> None:
        """Node `index` loses power: its kubelet, device plugin, containerd, shims and containers are
        SIGKILLed at once. Nothing is cleaned up or reported; the control plane finds out by the missed
        heartbeats, as it would of a real machine."""
        node = self.nodes[index]
        for kind in ("kubelet", "device-plugin", "containerd"):
            pid = pids.get(node_process(node, kind))
            if pid:
                processes.kill(pid, marker)
        stop_workloads(node.host_dir, [node.cgroup_root])

    def restart_node(self, index: int, launch: Launch) -> None:
        """The machine is back: containerd (the images it pulled are still in its store), then the kubelet."""
        node = self.nodes[index]
        # A reboot clears /run; here the dead containerd's socket files are still there.
        for stale in (node.containerd_socket, Path(f"{node.containerd_socket}.ttrpc")):
            stale.unlink(missing_ok=True)
        self._launch_containerd(node, launch)
        node.wait_containerd()
        self._launch_kubelet(node, launch)

    def wait_ready(self, core, timeout: float) -> None:
        """Every real node Ready and advertising its fake GPUs (the device plugin registered)."""
        deadline = time.monotonic() + timeout
        names = {n.name for n in self.nodes}
        pending: set[str] = names
        while time.monotonic() < deadline:
            pending = set(names)
            for node in core.list_node(label_selector=f"{netplan.REAL_NODE_LABEL}=true").items:
                ready = any(c.type == "Ready" and c.status == "True" for c in node.status.conditions or [])
                gpus = (node.status.allocatable or {}).get(self.pool.gpu_resource_name, "0")
                if ready and int(gpus) == self.pool.gpus_per_node:
                    pending.discard(node.metadata.name)
            if not pending:
                return
            time.sleep(0.25)
        raise TimeoutError(f"real nodes not Ready with their GPUs after {timeout}s: {sorted(pending)}")


def node_process(node: RealNode, kind: str) -> str:
    """The name a node's process is started, logged and recorded under: kubelet-0, containerd-1, ..."""
    return f"{kind}-{node.index}"


def stop_workloads(nodes_root: Path, cgroup_names: list[str]) -> None:
    """Kill every container process (by cgroup) and every containerd shim under `nodes_root` (all the
    nodes' folder, or one node's)."""
    for _ in range(50):
        pids = set()
        for name in cgroup_names:
            pids |= cgroup_pids(name)
        pids |= set(processes.pids_with_marker(f"{nodes_root}/"))  # shims: `-address <nodes_root>/...`
        if not pids:
            return
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        time.sleep(0.1)
    raise RuntimeError(f"container processes of {nodes_root} survived SIGKILL")


def teardown(cluster: str) -> list[str]:
    """Kill what runs on the cluster's real nodes and undo its journal; returns what could not be undone."""
    path = journal_path(cluster)
    if not path.exists():
        return []
    journal = HostJournal(path)
    owner = next((r["marker"] for r in journal.records if r["kind"] == "owner"), None)
    if owner:
        for pid in processes.pids_with_marker(owner):
            processes.stop(pid, owner, grace_seconds=5)
    cgroups = [r["name"] for r in journal.records if r["kind"] == "cgroup"]
    stop_workloads(path.parent / "nodes", cgroups)
    unmount_all(path.parent / "nodes")
    return journal.undo()


def reclaim_stale_clusters() -> None:
    """Undo the host changes of real-node clusters whose processes are gone (a killed cluster-up)."""
    for path in sorted(JOURNALS.glob("*/journal.json")) if JOURNALS.exists() else ():
        records = HostJournal(path).records
        owner = next((r["marker"] for r in records if r["kind"] == "owner"), None)
        if owner and processes.pids_with_marker(owner):
            continue  # alive: its owner stops it
        errors = teardown(path.parent.name)
        if errors:
            raise RuntimeError(f"could not undo the host changes of {path}: {errors}")

