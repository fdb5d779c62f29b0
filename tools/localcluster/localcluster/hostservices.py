"""Cluster-wide pieces of a real-node cluster: identities, RBAC, CoreDNS and kube-proxy as host processes.

Identities are bearer tokens in the apiserver's token file (a kubelet is `system:node:<name>` in
`system:nodes`, so the Node authorizer and NodeRestriction treat it as they treat a real kubelet). The
apiserver authenticates to kubelets with a client certificate from a small CA of our own, which each
kubelet trusts for x509 and checks against RBAC through its webhook authorizer.
"""

from __future__ import annotations

import secrets
import subprocess
from dataclasses import dataclass
from pathlib import Path

import yaml

from localcluster import netplan
from localcluster.binaries import Binaries

KUBELET_CLIENT_USER = "kube-apiserver-kubelet-client"
COREDNS_USER = "system:coredns"
KUBE_PROXY_USER = "system:kube-proxy"  # bound to system:node-proxier by the bootstrap RBAC


@dataclass(frozen=True)
class Identity:
    user: str
    groups: tuple[str, ...]
    token: str

    def token_line(self) -> str:
        return f'{self.token},{self.user},{self.user},"{",".join(self.groups)}"'


def new_identity(user: str, *groups: str) -> Identity:
    return Identity(user, groups, secrets.token_hex(24))


def make_kubelet_client_pki(pki: Path) -> tuple[Path, Path, Path]:
    """A CA the kubelets trust, and the apiserver's client certificate signed by it: (ca, cert, key)."""
    pki.mkdir(parents=True, exist_ok=True)
    ca, ca_key = pki / "kubelet-client-ca.crt", pki / "kubelet-client-ca.key"
    cert, key, csr = pki / "apiserver-kubelet-client.crt", pki / "apiserver-kubelet-client.key", pki / "client.csr"

    def openssl(*args: str) -> None:
        subprocess.run(["openssl", *args], check=True, capture_output=True)

    openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "30", "-subj", "/CN=mnlc-kubelet-client-ca",
            "-keyout", str(ca_key), "-out", str(ca))
    openssl("req", "-newkey", "rsa:2048", "-nodes", "-subj", f"/CN={KUBELET_CLIENT_USER}",
            "-keyout", str(key), "-out", str(csr))
    openssl("x509", "-req", "-in", str(csr), "-CA", str(ca), "-CAkey", str(ca_key), "-CAcreateserial",
            "-days", "30", "-out", str(cert))
    return ca, cert, key


def rbac_objects() -> list[dict]:
    """What the host services need beyond the bootstrap RBAC."""
    return [
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
         "metadata": {"name": "mnlc:kubelet-api-admin"},
         "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                     "name": "system:kubelet-api-admin"},
         "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": KUBELET_CLIENT_USER}]},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole", "metadata": {"name": "mnlc:coredns"},
         "rules": [{"apiGroups": [""], "resources": ["endpoints", "services", "pods", "namespaces"],
                    "verbs": ["list", "watch"]},
                   {"apiGroups": ["discovery.k8s.io"], "resources": ["endpointslices"], "verbs": ["list", "watch"]}]},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
         "metadata": {"name": "mnlc:coredns"},
         "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "mnlc:coredns"},
         "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": COREDNS_USER}]},
    ]


def coredns_args(bins: Binaries, config_dir: Path, kubeconfig: Path) -> list[str]:
    # No `forward` and no `cache`: names outside the cluster do not resolve (nothing leaves the machine),
    # and a headless record appears the moment its pod has an address.
    corefile = config_dir / "Corefile"
    corefile.write_text(
        f".:53 {{\n  bind {netplan.DNS_ADDRESS}\n  errors\n"
        f"  kubernetes {netplan.CLUSTER_DOMAIN} in-addr.arpa ip6.arpa {{\n"
        f"    kubeconfig {kubeconfig}\n    pods insecure\n    ttl 0\n    fallthrough in-addr.arpa ip6.arpa\n  }}\n}}\n")
    return [str(bins.coredns), "-conf", str(corefile)]


def kube_proxy_args(bins: Binaries, config_dir: Path, kubeconfig: Path, hostname: str) -> list[str]:
    """One kube-proxy for every real node: they share the host's network namespace and would fight."""
    config = {
        "apiVersion": "kubeproxy.config.k8s.io/v1alpha1", "kind": "KubeProxyConfiguration",
        "clientConnection": {"kubeconfig": str(kubeconfig)},
        "mode": "iptables", "clusterCIDR": netplan.POD_RANGE, "hostnameOverride": hostname,
        "bindAddress": netplan.API_ADDRESS,
        "healthzBindAddress": f"{netplan.API_ADDRESS}:10256", "metricsBindAddress": f"{netplan.API_ADDRESS}:10249",
        # Only the node range: a localhost NodePort would make kube-proxy set route_localnet.
        "nodePortAddresses": [netplan.NODE_ADDRESS_RANGE],
        # Zeros: leave the host's conntrack sysctls alone.
        "conntrack": {"maxPerCore": 0, "min": 0, "tcpEstablishedTimeout": "0s", "tcpCloseWaitTimeout": "0s"},
    }
    path = config_dir / "kube-proxy.yaml"
    path.write_text(yaml.safe_dump(config))
    return [str(bins.kube_proxy), f"--config={path}"]


def kube_proxy_cleanup(bins: Binaries) -> None:
    subprocess.run([str(bins.kube_proxy), "--cleanup"], capture_output=True, check=False)
