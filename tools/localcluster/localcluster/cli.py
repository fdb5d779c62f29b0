"""`localcluster up|down|status|build|prepare|images|push|release|actionlint`: the entry points behind
`make cluster-up`, `make cluster-down`, `make push`, `make release` and the workflow check of `make lint`."""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from pathlib import Path

from localcluster import binaries, images, prepare, publish, release
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
    sub.add_parser("images", help="build the container images (cached) and print their OCI layouts")
    push = sub.add_parser("push", help="push the operator and trainer images and the chart to a registry (make push)")
    push.add_argument("--registry", required=True, help="host[:port] of the registry (MULTINODE_REGISTRY)")
    push.add_argument("--images", nargs="+", default=list(publish.PUSHED_IMAGES),
                      choices=[images.PAUSE, images.OPERATOR, images.TRAINER])
    push.add_argument("--chart-repository", help="where the chart goes (default: <registry>/charts)")
    rel = sub.add_parser("release", help="push a release's operator image and chart, write its SBOM (make release)")
    rel.add_argument("--registry", help="host[:port]: the image goes to <registry>/multinode/operator")
    rel.add_argument("--chart-repository", help="the chart goes to oci://<this>/multinode-operator")
    rel.add_argument("--out", type=Path, help="folder for the chart package, the SBOM, release.json")
    rel.add_argument("--check-tag", metavar="TAG", help="only check that the git tag is v<version>, and exit")
    sub.add_parser("actionlint", help="check .github/workflows with the pinned actionlint (make lint)")
    sub.add_parser("bin-path", help="print the folders holding the pinned kubectl and helm")
    return p


def main(argv: list[str] | None = None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    if args.command == "build":
        binaries.ensure_built()
        return 0
    if args.command == "prepare":
        return prepare.prepare(images=args.images, peers=args.peers, frameworks=args.frameworks, release=args.release)
    if args.command == "images":
        for image in images.build_images().values():
            print(f"{image.name}  image ID {image.image_id}  manifest {image.manifest_digest}", file=sys.stderr)
            print(image.layout)
        return 0
    if args.command == "push":
        return publish.main(args.registry, args.images, args.chart_repository)
    if args.command == "release":
        if args.check_tag is not None:
            return release.check_tag(args.check_tag)
        missing = [f"--{name.replace('_', '-')}" for name in ("registry", "chart_repository", "out")
                   if getattr(args, name) is None]
        if missing:
            parser.error(f"release: the following arguments are required: {', '.join(missing)}")
        return release.main(args.registry, args.chart_repository, args.out)
    if args.command == "actionlint":
        # shellcheck and pyflakes are not used: whether they are installed would change what lint finds. The
        # workflow's `run:` steps are one-line make calls.
        return subprocess.run([str(binaries.actionlint()), "-shellcheck=", "-pyflakes="], cwd=binaries.REPO_ROOT,
                              check=False).returncode
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
        print(f"export MULTINODE_REGISTRY={cluster.registry}")
        return 0
    cluster = LocalCluster(ClusterConfig(name=args.name))
    if args.command == "down":
        cluster.stop()
        print(f"cluster {args.name!r} stopped", file=sys.stderr)
        return 0
    running = cluster.is_running()
    registry = f"; MULTINODE_REGISTRY={cluster.registry}" if running else ""
    print(f"cluster {args.name!r}: {'running' if running else 'not running'}; "
          f"KUBECONFIG={cluster.kubeconfig}{registry}")
    return 0 if running else 1


if __name__ == "__main__":
    sys.exit(main())
