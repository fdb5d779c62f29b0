"""`localcluster up|down|status|build|prepare`: the entry points behind `make cluster-up` and `make cluster-down`."""

from __future__ import annotations

import argparse
import sys
import time

from localcluster import binaries, images, prepare
from localcluster.cluster import ClusterConfig, LocalCluster
from localcluster.timings import TIMINGS
from localcluster.nodes import NodePoolConfig


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="localcluster", description=__doc__)
    sub = p.add_subparsers(dest="command", required=True)
    up = sub.add_parser("up", help="build what is missing, start the control plane and fake GPU nodes")
    up.add_argument("--name", default="default")
    up.add_argument("--nodes", type=int, default=8, help="number of fake GPU nodes")
    up.add_argument("--gpus-per-node", type=int, default=8)
    up.add_argument("--gpu-product", default=NodePoolConfig.gpu_product)
    up.add_argument("--rdma-resource", default=NodePoolConfig.rdma_resource_name)
    up.add_argument("--rdma-per-node", type=int, default=1)
    up.add_argument("--nodes-per-block", type=int, default=4, help="nodes per topology block label")
    up.add_argument("--real-nodes", type=int, default=0,
                    help="real kubelet + containerd nodes beside the kwok nodes (needs root)")
    up.add_argument("--timings", choices=sorted(TIMINGS), default="short",
                    help="node-lifecycle timings: short (20 s grace, 5 s tolerations) or stock (40 s, 300 s)")
    up.add_argument("--no-gang-scheduling", action="store_true",
                    help="do not serve scheduling.k8s.io/v1alpha2 (Workload, PodGroup) nor enable its feature gates")
    up.add_argument("--reuse", action="store_true", help="keep a running cluster of this name instead of restarting")
    for name in ("down", "status"):
        sub.add_parser(name).add_argument("--name", default="default")
    sub.add_parser("build", help="build the pinned binaries (skipped when cached)")
    prepare.add_arguments(sub.add_parser("prepare", help="build binaries (and images, torch, peers) side by side"))
    sub.add_parser("images", help="build the real nodes' container images (cached) and print their archives")
    sub.add_parser("bin-path", help="print the folders holding the pinned kubectl and helm")
    return p


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if args.command == "build":
        binaries.ensure_built()
        return 0
    if args.command == "prepare":
        return prepare.prepare(images=args.images, peers=args.peers, frameworks=args.frameworks)
    if args.command == "images":
        built = images.build_images()
        for image in built:
            print(f"{image.ref}  image ID {image.image_id}  ({image.digest_ref})", file=sys.stderr)
        for archive in dict.fromkeys(image.archive for image in built):
            print(f"{archive.stat().st_size / 1e6:.0f} MB: {archive}", file=sys.stderr)
            print(archive)
        return 0
    if args.command == "bin-path":
        print(":".join(str(p) for p in binaries.bin_path_dirs()))
        return 0
    if args.command == "up":
        pool = NodePoolConfig(count=args.nodes, gpus_per_node=args.gpus_per_node, gpu_product=args.gpu_product,
                              rdma_resource_name=args.rdma_resource, rdma_per_node=args.rdma_per_node,
                              nodes_per_block=args.nodes_per_block)
        cluster = LocalCluster(ClusterConfig(name=args.name, nodes=pool, real_nodes=args.real_nodes,
                                              timings=args.timings, gang_scheduling=not args.no_gang_scheduling))
        if args.reuse and cluster.is_running():
            print(f"cluster {args.name!r} already running", file=sys.stderr)
        else:
            started = time.monotonic()
            cluster.start()
            real = f" and {args.real_nodes} real nodes" if args.real_nodes else ""
            real += f", {args.timings} node timings"
            print(f"cluster {args.name!r} up with {args.nodes} fake GPU nodes{real} Ready in "
                  f"{time.monotonic() - started:.1f}s (logs: {cluster.dir / 'logs'})", file=sys.stderr)
        print(f"export KUBECONFIG={cluster.kubeconfig}")
        return 0
    cluster = LocalCluster(ClusterConfig(name=args.name))
    if args.command == "down":
        cluster.stop()
        print(f"cluster {args.name!r} stopped", file=sys.stderr)
        return 0
    running = cluster.is_running()
    print(f"cluster {args.name!r}: {'running' if running else 'not running'}; KUBECONFIG={cluster.kubeconfig}")
    return 0 if running else 1


if __name__ == "__main__":
    sys.exit(main())
