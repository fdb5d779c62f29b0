"""A real node: one kubelet with its own containerd + runc, a CNI bridge, and the fake device plugin.

All real nodes share the host's network namespace (each has its own address on `lo`), so the kubelet's few
hard-coded host paths (`/var/lib/kubelet/device-plugins`, `/var/lib/kubelet/pki`, `/var/log/containers`)
would be fought over: each kubelet runs in a mount namespace of its own with its node's folders bound over
them. Its root folder is bind-mounted onto itself and made shared in the host namespace first, so volume
mounts the kubelet makes there (ServiceAccount tokens, emptyDirs) are seen by containerd, which lives in
the host namespace.
"""

from __future__ import annotations

import json
import shlex
import time
from dataclasses import dataclass
from pathlib import Path

import yaml

from localcluster import netplan
from localcluster.binaries import Binaries
from localcluster.hostchanges import HostJournal
from localcluster import registry
from localcluster.nodes import NodePoolConfig, node_labels, node_name

# Paths the kubelet uses whatever its --root-dir says; each kubelet gets its own copy bound over them.
KUBELET_FIXED_PATHS = {
    "device-plugins": Path("/var/lib/kubelet/device-plugins"),
    "pki": Path("/var/lib/kubelet/pki"),
    "containers-log": Path("/var/log/containers"),
}
# Where the fake device plugin lists a container's RDMA device IDs (as SR-IOV's lists its VFs in
# PCIDEVICE_<RESOURCE>): a job's healthCheck.rdmaDeviceEnv names it, there being no /dev/infiniband here.
FAKE_RDMA_DEVICES_ENV = "MULTINODE_FAKE_RDMA_DEVICES"
# containerd's CNI result cache and shim sockets ignore its root and state folders.
RUNTIME_FIXED_PATHS = (Path("/var/lib/cni"), Path("/run/containerd"))


@dataclass(frozen=True)
class RealNode:
    cluster: str
    pool: NodePoolConfig
    index: int
    config_dir: Path  # in the checkout's cluster folder: configs (their paths mark our processes)
    host_dir: Path  # under the host-wide root: sockets (short paths), kubelet root, containerd data

    @property
    def name(self) -> str:
        return node_name(self.pool, self.index)

    @property
    def address(self) -> str:
        return netplan.node_address(self.index)

    @property
    def containerd_socket(self) -> Path:
        return self.host_dir / "containerd.sock"

    @property
    def kubelet_root(self) -> Path:
        return self.host_dir / "kubelet"

    @property
    def device_plugin_dir(self) -> Path:
        return self.host_dir / "device-plugins"

    @property
    def cgroup_root(self) -> str:
        return f"/mnlc-{self.cluster}-{self.index}"

    @property
    def devices_file(self) -> Path:
        """The fake device plugin's config; rewrite it to change what the node advertises."""
        return self.config_dir / "devices.json"

    # ---- preparing the host ---------------------------------------------------------------------------

    def prepare(self, journal: HostJournal, bins: Binaries, client_ca: Path, registry_address: str,
                sandbox_image: str) -> None:
        self.config_dir.mkdir(parents=True, exist_ok=True)
        journal.make_dir(self.host_dir)
        for sub in ("containerd", "cni/net.d", "cni/ipam", "pod-logs", *KUBELET_FIXED_PATHS):
            (self.host_dir / sub).mkdir(parents=True, exist_ok=True)
        self.kubelet_root.mkdir(exist_ok=True)
        journal.bind_mount(self.kubelet_root, "shared")
        journal.make_cgroup(self.cgroup_root)
        journal.expect_link(netplan.bridge_name(self.index))
        self._write_cni_config()
        registry.containerd_hosts(registry_address, self.registry_hosts_dir)
        self._write_containerd_config(bins, sandbox_image)
        self._write_kubelet_config(client_ca)
        self.set_devices(self.pool.gpus_per_node, self.pool.rdma_per_node)

    def _write_cni_config(self) -> None:
        conflist = {
            "cniVersion": "1.0.0", "name": "mnlc",
            "plugins": [{
                "type": "bridge", "bridge": netplan.bridge_name(self.index), "isGateway": True,
                "ipMasq": False, "hairpinMode": True,
                "ipam": {"type": "host-local", "ranges": [[{"subnet": netplan.pod_subnet(self.index)}]],
                         "routes": [{"dst": "0.0.0.0/0"}], "dataDir": str(self.host_dir / "cni" / "ipam")},
            }],
        }
        (self.host_dir / "cni" / "net.d" / "10-mnlc.conflist").write_text(json.dumps(conflist, indent=1))

    @property
    def registry_hosts_dir(self) -> Path:
        """containerd's config_path: a folder per registry host with its hosts.toml."""
        return self.config_dir / "certs.d"

    def _write_containerd_config(self, bins: Binaries, sandbox_image: str) -> None:
        c = self.host_dir / "containerd"
        cri = "plugins.'io.containerd.cri.v1.runtime'"
        lines = [
            "version = 3",
            f"root = {json.dumps(str(c / 'root'))}",
            f"state = {json.dumps(str(c / 'state'))}",
            "[grpc]", f"  address = {json.dumps(str(self.containerd_socket))}",
            "[ttrpc]", f"  address = {json.dumps(str(self.containerd_socket) + '.ttrpc')}",
            "[plugins.'io.containerd.internal.v1.opt']", f"  path = {json.dumps(str(c / 'opt'))}",
            "[plugins.'io.containerd.nri.v1.nri']", "  disable = true",
            "[plugins.'io.containerd.cri.v1.images']", "  snapshotter = 'overlayfs'",
            "[plugins.'io.containerd.cri.v1.images'.pinned_images]", f"  sandbox = {json.dumps(sandbox_image)}",
            "[plugins.'io.containerd.cri.v1.images'.registry]",
            f"  config_path = {json.dumps(str(self.registry_hosts_dir))}",
            f"[{cri}]",
            # No CAP_SYS_RESOURCE in this VM: containerd may not lower a container's OOM score below its own.
            "  restrict_oom_score_adj = true",
            "  netns_mounts_under_state_dir = true",
            "  enable_selinux = false",
            f"[{cri}.cni]",
            f"  bin_dirs = [{json.dumps(str(bins.cni_plugins))}]",
            f"  conf_dir = {json.dumps(str(self.host_dir / 'cni' / 'net.d'))}",
            f"[{cri}.containerd]", "  default_runtime_name = 'runc'",
            f"[{cri}.containerd.runtimes.runc]", "  runtime_type = 'io.containerd.runc.v2'",
            f"[{cri}.containerd.runtimes.runc.options]",
            f"  BinaryName = {json.dumps(str(bins.runc))}", "  SystemdCgroup = false",
        ]
        (self.config_dir / "containerd.toml").write_text("\n".join(lines) + "\n")

    def _write_kubelet_config(self, client_ca: Path) -> None:
        resolv = self.config_dir / "resolv.conf"
        # Only the cluster DNS: the host's resolver must not leak into pods (nothing routes off the machine).
        resolv.write_text(f"nameserver {netplan.DNS_ADDRESS}\n")
        config = {
            "apiVersion": "kubelet.config.k8s.io/v1beta1", "kind": "KubeletConfiguration",
            "address": self.address, "port": netplan.KUBELET_PORT, "readOnlyPort": 0,
            "healthzBindAddress": self.address, "healthzPort": 10248,
            "cgroupDriver": "cgroupfs", "cgroupRoot": self.cgroup_root, "failCgroupV1": False,
            "containerRuntimeEndpoint": f"unix://{self.containerd_socket}",
            "podLogsDir": str(self.host_dir / "pod-logs"),
            "resolvConf": str(resolv),
            "clusterDNS": [netplan.DNS_ADDRESS], "clusterDomain": netplan.CLUSTER_DOMAIN,
            "authentication": {"anonymous": {"enabled": False}, "webhook": {"enabled": True},
                               "x509": {"clientCAFile": str(client_ca)}},
            "authorization": {"mode": "Webhook"},
            "registerWithTaints": [netplan.REAL_NODE_TAINT],
            "failSwapOn": False,
            # Pulled images stay (no image garbage collection, no eviction for disk): a test never waits for a
            # pull again because a disk shared with the build caches looked full.
            "imageGCHighThresholdPercent": 100, "imageGCLowThresholdPercent": 99,
            "evictionHard": {"memory.available": "100Mi", "nodefs.available": "1%", "imagefs.available": "1%",
                             "nodefs.inodesFree": "1%"},
            "serializeImagePulls": False,
            "maxPods": self.pool.max_pods,
        }
        (self.config_dir / "kubelet.yaml").write_text(yaml.safe_dump(config))

    def set_devices(self, gpus: int, rdma: int, unhealthy_gpus: int = 0, visible_gpus: int | None = None) -> None:
        """What the fake device plugin advertises (re-read by the plugin every second). `visible_gpus`: a
        container allocated GPUs sees at most this many of their IDs (a node whose driver lost GPUs)."""
        gpu: dict[str, object] = {"resource": self.pool.gpu_resource_name, "count": gpus,
                                  "env": "NVIDIA_VISIBLE_DEVICES", "unhealthy": unhealthy_gpus}
        if visible_gpus is not None:
            gpu["visible"] = visible_gpus
        resources = [gpu,
                     {"resource": self.pool.rdma_resource_name, "count": rdma, "env": FAKE_RDMA_DEVICES_ENV}]
        tmp = self.devices_file.with_suffix(".tmp")
        tmp.write_text(json.dumps(resources))
        tmp.replace(self.devices_file)

    # ---- processes ------------------------------------------------------------------------------------

    def containerd_args(self, bins: Binaries) -> list[str]:
        return [str(bins.containerd), "--config", str(self.config_dir / "containerd.toml"), "--log-level", "warn"]

    def device_plugin_args(self, bins: Binaries) -> list[str]:
        return [str(bins.device_plugin), "--dir", str(self.device_plugin_dir), "--config", str(self.devices_file)]

    def kubelet_args(self, bins: Binaries, kubeconfig: Path) -> list[str]:
        binds = [f"mount --bind {shlex.quote(str(self.host_dir / sub))} {shlex.quote(str(target))}"
                 for sub, target in KUBELET_FIXED_PATHS.items()]
        labels = {netplan.REAL_NODE_LABEL: "true", **node_labels(self.pool, self.index, "real")}
        kubelet = [
            str(bins.kubelet), f"--config={self.config_dir / 'kubelet.yaml'}", f"--kubeconfig={kubeconfig}",
            f"--root-dir={self.kubelet_root}", f"--cert-dir={self.host_dir / 'pki'}",
            f"--node-ip={self.address}", f"--hostname-override={self.name}",
            "--node-labels=" + ",".join(f"{k}={v}" for k, v in sorted(labels.items())),
            "--v=1",
        ]
        script = " && ".join([*binds, "exec " + shlex.join(kubelet)])
        return ["unshare", "--mount", "--propagation", "unchanged", "sh", "-c", script]

    def wait_containerd(self, timeout: float = 30.0) -> None:
        deadline = time.monotonic() + timeout
        while not self.containerd_socket.is_socket():
            if time.monotonic() > deadline:
                raise TimeoutError(f"containerd of {self.name} made no socket in {timeout}s")
            time.sleep(0.05)
