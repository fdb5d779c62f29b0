"""Every change a real-node cluster makes to the host, written down before it is made, undone in reverse.

A real-node cluster changes the host: addresses on `lo`, sysctls (its own and the kubelet's), iptables
rules and chains (its own, kube-proxy's and the kubelet's), bind mounts, cgroups, bridges, folders outside
the repository. Each change is recorded in a journal *before* it is made, so that a cluster-up killed
halfway (or a SIGKILLed test session) still leaves a journal that undoes everything it got to. The journal
lives in a host-wide folder (`HOST_ROOT`), not in the checkout, so another clone on the same machine finds
and undoes it too.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

# Host-wide: real nodes share one network namespace, so one real-node cluster at a time per host.
HOST_ROOT = Path("/var/lib/mnlc")

# Sysctls that the kubelet, kube-proxy, the CNI bridge and ip_forward change. All are recorded and put
# back; ip_forward first, because writing it flips every conf.*.forwarding.
SYSCTL_FILES = (
    "net/ipv4/ip_forward",
    "kernel/panic", "kernel/panic_on_oops", "vm/overcommit_memory", "vm/panic_on_oom",
    "kernel/keys/root_maxkeys", "kernel/keys/root_maxbytes",
    "net/bridge/bridge-nf-call-iptables", "net/bridge/bridge-nf-call-ip6tables",
    "net/netfilter/nf_conntrack_max", "net/netfilter/nf_conntrack_tcp_timeout_established",
    "net/netfilter/nf_conntrack_tcp_timeout_close_wait", "net/netfilter/nf_conntrack_tcp_be_liberal",
)
SYSCTL_DIRS = ("net/ipv4/conf", "net/ipv6/conf")
SYSCTL_DIR_KEYS = ("forwarding", "accept_redirects", "route_localnet", "rp_filter", "send_redirects")

# iptables chains of ours and of Kubernetes components (kube-proxy, the kubelet's KUBE-FIREWALL): removed
# from every table at teardown; tables the host did not have before are deleted whole.
OWNED_CHAIN_PREFIXES = ("KUBE-", "MNLC-", "CNI-")


def run(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    return subprocess.run(list(args), check=check, capture_output=True, text=True)


def read_sysctls() -> dict[str, str]:
    """The values of every sysctl this module restores (a snapshot, also used by tests)."""
    values = {}
    root = Path("/proc/sys")
    for name in SYSCTL_FILES:
        try:
            values[name] = (root / name).read_text().strip()
        except OSError:
            pass
    for d in SYSCTL_DIRS:
        for iface in sorted((root / d).glob("*")):
            for key in SYSCTL_DIR_KEYS:
                try:
                    values[f"{d}/{iface.name}/{key}"] = (iface / key).read_text().strip()
                except OSError:
                    pass
    return values


def lo_addresses() -> set[str]:
    out = run("ip", "-4", "-o", "addr", "show", "dev", "lo").stdout
    return {line.split()[3].split("/")[0] for line in out.splitlines()}


def nft_tables() -> list[str]:
    out = run("nft", "list", "tables", check=False).stdout
    return sorted(line.split(" ", 1)[1] for line in out.splitlines() if line.startswith("table "))


class HostJournal:
    """An append-only list of undo records in `path`, saved (atomically) before each change."""

    def __init__(self, path: Path):
        self.path = path
        self.records: list[dict] = []
        if path.exists():
            self.records = json.loads(path.read_text())

    def _save(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_suffix(".tmp")
        with open(tmp, "w") as f:
            json.dump(self.records, f, indent=1)
            f.flush()
            os.fsync(f.fileno())
        tmp.replace(self.path)

    def record(self, kind: str, **data) -> None:
        self.records.append({"kind": kind, **data})
        self._save()

    # ---- changes (each records itself first) ---------------------------------------------------------

    def make_dir(self, path: Path) -> None:
        """Create `path` (and parents); remove at undo only what did not exist before."""
        missing = []
        p = path
        while not p.exists():
            missing.append(p)
            p = p.parent
        for p in reversed(missing):
            self.record("dir", path=str(p))
            p.mkdir()

    def add_address(self, address: str) -> None:
        if address in lo_addresses():
            raise RuntimeError(f"{address} is already on lo: another real-node cluster runs on this host, or "
                               "one crashed without its journal; `make cluster-down` in that checkout")
        self.record("address", address=address)
        run("ip", "addr", "add", f"{address}/32", "dev", "lo")

    def snapshot_sysctls(self) -> None:
        self.record("sysctls", values=read_sysctls())

    def set_sysctl(self, name: str, value: str) -> None:
        (Path("/proc/sys") / name).write_text(value)

    def snapshot_iptables(self) -> None:
        self.record("nft-tables", before=nft_tables())

    def add_iptables_rule(self, table: str, chain: str, *rule: str) -> None:
        self.record("iptables-rule", table=table, chain=chain, rule=list(rule))
        run("iptables", "-t", table, "-I", chain, *rule)

    def bind_mount(self, path: Path, propagation: str) -> None:
        """Bind `path` onto itself with the given propagation (shared / private)."""
        self.record("mount", path=str(path))
        run("mount", "--bind", str(path), str(path))
        run("mount", f"--make-{propagation}", str(path))

    def bind_readonly(self, source: Path, target: Path) -> None:
        """Show `source` at `target`, read-only (the trainer environment pods mount by hostPath)."""
        self.record("mount", path=str(target))
        run("mount", "--bind", str(source), str(target))
        run("mount", "-o", "remount,bind,ro", str(target))

    def make_cgroup(self, name: str) -> None:
        """`/sys/fs/cgroup/<hierarchy>/<name>` in every hierarchy; cpuset copies its parent's cpus/mems."""
        self.record("cgroup", name=name)
        for hierarchy in cgroup_hierarchies():
            d = hierarchy / name.strip("/")
            d.mkdir(exist_ok=True)
            if hierarchy.name == "cpuset":
                for f in ("cpuset.cpus", "cpuset.mems"):
                    (d / f).write_text((hierarchy / f).read_text())

    def expect_link(self, name: str) -> None:
        """A network link another program will create (the CNI bridge): deleted at undo."""
        self.record("link", name=name)

    # ---- undo -------------------------------------------------------------------------------------------

    def undo(self) -> list[str]:
        """Undo every record, newest first; returns what could not be undone (empty when all went)."""
        errors = []
        for rec in reversed(self.records):
            try:
                _UNDO[rec["kind"]](rec)
            except Exception as e:  # noqa: BLE001 - one failed undo must not stop the others
                errors.append(f"{rec['kind']} {rec}: {e}")
        if not errors:
            self.path.unlink(missing_ok=True)
            for d in (self.path.parent, *self.path.parent.parents):
                if d == HOST_ROOT.parent or not d.exists() or any(d.iterdir()):
                    break
                d.rmdir()
        return errors


def cgroup_hierarchies() -> list[Path]:
    """Every cgroup v1 hierarchy and the cgroup2 mount (the kubelet uses both on a hybrid host)."""
    found = []
    for line in Path("/proc/self/mounts").read_text().splitlines():
        fields = line.split()
        if fields[2] in ("cgroup", "cgroup2"):
            found.append(Path(fields[1]))
    return found


def cgroup_pids(name: str) -> set[int]:
    pids: set[int] = set()
    for hierarchy in cgroup_hierarchies():
        root = hierarchy / name.strip("/")
        for procs in root.rglob("cgroup.procs") if root.exists() else ():
            try:
                pids.update(int(p) for p in procs.read_text().split())
            except OSError:
                pass
    return pids


def mounts_under(path: Path) -> list[str]:
    """Mount points at or below `path`, deepest first (mountinfo escapes spaces as \\040)."""
    prefix = str(path).rstrip("/")
    points = []
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        point = line.split()[4].replace("\\040", " ")
        if point == prefix or point.startswith(prefix + "/"):
            points.append(point)
    return sorted(points, key=lambda p: p.count("/"), reverse=True)


def unmount_all(path: Path) -> None:
    for _ in range(5):  # a lazy unmount of a parent can reveal mounts stacked below it
        points = mounts_under(path)
        if not points:
            return
        for point in points:
            run("umount", "-l", point, check=False)


def _undo_dir(rec: dict) -> None:
    path = Path(rec["path"])
    if path.exists():
        unmount_all(path)
        shutil.rmtree(path)


def _undo_address(rec: dict) -> None:
    if rec["address"] in lo_addresses():
        run("ip", "addr", "del", f"{rec['address']}/32", "dev", "lo")


def _undo_sysctls(rec: dict) -> None:
    # In recorded order: ip_forward first (SYSCTL_FILES order), since writing it flips conf.*.forwarding.
    for name, value in rec["values"].items():
        path = Path("/proc/sys") / name
        try:
            if path.read_text().strip() != value:
                path.write_text(value)
        except FileNotFoundError:
            pass  # an interface that went away with the cluster


def _undo_iptables_rule(rec: dict) -> None:
    run("iptables", "-t", rec["table"], "-D", rec["chain"], *rec["rule"], check=False)


def _undo_nft_tables(rec: dict) -> None:
    before = set(rec["before"])
    for table in nft_tables():
        if table not in before:
            run("nft", "delete", "table", *table.split(" ", 1), check=False)
            continue
        family, name = table.split(" ", 1)
        listing = run("nft", "-j", "list", "table", family, name, check=False).stdout
        chains = [item["chain"]["name"] for item in json.loads(listing or "{}").get("nftables", [])
                  if "chain" in item]
        ours = [c for c in chains if c.startswith(OWNED_CHAIN_PREFIXES)]
        for chain in chains:  # rules that jump to our chains, in the host's own chains
            if chain in ours:
                continue
            rules = run("nft", "-a", "list", "chain", family, name, chain, check=False).stdout
            for line in rules.splitlines():
                if "# handle" in line and any(f"jump {c}" in line or f"goto {c}" in line for c in ours):
                    handle = line.rsplit("# handle", 1)[1].strip()
                    run("nft", "delete", "rule", family, name, chain, "handle", handle, check=False)
        for chain in ours:
            run("nft", "flush", "chain", family, name, chain, check=False)
        for chain in ours:
            run("nft", "delete", "chain", family, name, chain, check=False)


def _undo_mount(rec: dict) -> None:
    unmount_all(Path(rec["path"]))


def _undo_cgroup(rec: dict) -> None:
    for hierarchy in cgroup_hierarchies():
        root = hierarchy / rec["name"].strip("/")
        if not root.exists():
            continue
        for d in sorted((p for p in root.rglob("*") if p.is_dir()), key=lambda p: len(p.parts), reverse=True):
            d.rmdir()
        root.rmdir()


def _undo_link(rec: dict) -> None:
    if run("ip", "link", "show", rec["name"], check=False).returncode == 0:
        run("ip", "link", "del", rec["name"])


_UNDO = {
    "owner": lambda rec: None,  # who made the changes: read by realcluster, nothing to undo
    "dir": _undo_dir, "address": _undo_address, "sysctls": _undo_sysctls, "iptables-rule": _undo_iptables_rule,
    "nft-tables": _undo_nft_tables, "mount": _undo_mount, "cgroup": _undo_cgroup, "link": _undo_link,
}
