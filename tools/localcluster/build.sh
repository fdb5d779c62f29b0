#!/usr/bin/env bash
# Builds the local control plane from the Go module proxy (no prebuilt binaries are reachable here).
#
#   tools/localcluster/build.sh [component...]     components: kubernetes (helm and kwok with it) etcd registry
#                                                  crane, and for real nodes debs containerd runc cni coredns
#                                                  pause deviceplugin gangcrds (default: all of these); jobset, kubeflow
#                                                  (the benchmark peers, built by `make peers`); actionlint
#                                                  (built by `make lint`); syft (by `make release`); kstatus
#                                                  and flux (by the GitOps tests)
#
# Each component is built once per version into $CACHE/bin/<component>-<version>/ and skipped when the
# binaries are already there. Kubernetes and etcd need a wrapper module: their go.mod files point staging
# modules at relative paths, which `go install pkg@version` refuses.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
# shellcheck source=versions.env
source "$here/versions.env"
CACHE=${MULTINODE_CACHE_DIR:-$root/.cache/localcluster}

export GOTOOLCHAIN=local CGO_ENABLED=0
# sum.golang.org is not reachable from this network; the module proxy is the trust root.
export GOSUMDB=off GOFLAGS=-mod=mod
# Build caches live outside the clone so a fresh clone on the same machine only re-links.
export GOCACHE=${GOCACHE:-$HOME/.cache/go-build}

log() { printf '[build] %s\n' "$*" >&2; }

have_all() {  # dir binary...
  local dir=$1; shift
  for b in "$@"; do [ -x "$dir/$b" ] || return 1; done
}

# wrapper_module DIR MODULE_PATH  — a scratch module in which we can `go get` / `go build`.
wrapper_module() {
  rm -rf "$1"; mkdir -p "$1"
  (cd "$1" && go mod init "$2" >/dev/null 2>&1 && go mod edit -go=1.26.0)
}

# Kubernetes, helm and kwok in one wrapper module and one `go build`: helm and kwok link the same k8s.io
# libraries, gRPC, OpenTelemetry and golang.org/x packages, so each is compiled once, not three times (cold,
# empty Go build cache: 300 s against 400 s for the three built one after the other; docs/development.md).
# The Kubernetes binaries link exactly the module versions a build of Kubernetes alone gives them (pinned
# before helm and kwok are added). Cache key: the three versions.
build_kubernetes() {
  local v=$KUBE_VERSION name="kubernetes-$KUBE_VERSION-helm-$HELM_VERSION-kwok-$KWOK_VERSION"
  local out="$CACHE/bin/$name" mod="$CACHE/src/$name" staging_v="v0.${KUBE_VERSION#v1.}"
  # kubelet and kube-proxy run the real nodes.
  local bins=(kube-apiserver kube-controller-manager kube-scheduler kubectl kubelet kube-proxy)
  if have_all "$out" "${bins[@]}" helm kwok && [ -d "$out/kwok-stages" ]; then
    log "kubernetes $v, helm $HELM_VERSION, kwok $KWOK_VERSION: cached"; return
  fi
  wrapper_module "$mod" multinode.dev/localcluster/controlplane
  # Every staging module k8s.io/kubernetes replaces with ./staging/... is published as v0.<minor>.<patch>.
  local staging
  staging=$(curl -fsS "$(go env GOPROXY | cut -d, -f1)/k8s.io/kubernetes/@v/$v.mod" |
    awk '/=> \.\/staging/ {print $1}')
  for m in $staging; do (cd "$mod" && go mod edit -replace "$m=$m@$staging_v"); done
  local major=${v#v}; major=${major%%.*}
  local minor=${v#v*.}; minor=${minor%%.*}
  local ld="-s -w -X helm.sh/helm/v3/internal/version.version=$HELM_VERSION"
  for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
    ld+=" -X $pkg.gitVersion=$v -X $pkg.gitMajor=$major -X $pkg.gitMinor=$minor -X $pkg.gitTreeState=clean"
  done
  # helm's default Kubernetes version (`helm template` and `helm lint` without a cluster) is v1.20 unless set
  # at link time, as helm's own Makefile does; our chart says kubeVersion >=1.30.
  for pkg in helm.sh/helm/v3/pkg/chartutil helm.sh/helm/v3/pkg/lint/rules; do
    ld+=" -X $pkg.k8sVersionMajor=$major -X $pkg.k8sVersionMinor=$minor"
  done
  local pkgs=()
  for b in "${bins[@]}"; do pkgs+=("k8s.io/kubernetes/cmd/$b"); done
  log "kubernetes $v: resolving modules"
  (cd "$mod" && go get "k8s.io/kubernetes@$v" && go get "${pkgs[@]/%/@$v}")
  # Pin the modules the Kubernetes binaries link, at the versions Kubernetes resolved, so that adding helm and
  # kwok moves none of them (and the shared packages compile once). helm and kwok get those versions too: for
  # golang.org/x, pflag, moby/term and a few others a patch or minor release older than the ones they ask for.
  local pins=()
  while read -r m ver; do
    [ -n "$ver" ] && ! grep -q "^replace $m " "$mod/go.mod" && pins+=("-replace=$m=$m@$ver")
  done < <(cd "$mod" && go list -deps -tags selinux,notest,grpcnotrace \
             -f '{{with .Module}}{{if not .Main}}{{.Path}} {{.Version}}{{end}}{{end}}' "${pkgs[@]}" | sort -u)
  (cd "$mod" && go mod edit "${pins[@]}")
  log "helm $HELM_VERSION, kwok $KWOK_VERSION: resolving modules"
  (cd "$mod" && go get "helm.sh/helm/v3/cmd/helm@$HELM_VERSION" "sigs.k8s.io/kwok/cmd/kwok@$KWOK_VERSION")
  pkgs+=(helm.sh/helm/v3/cmd/helm sigs.k8s.io/kwok/cmd/kwok)
  log "kubernetes $v, helm, kwok: compiling (about 5-9 min with empty Go caches on 2 cores, seconds relinking)"
  mkdir -p "$out.tmp"
  (cd "$mod" && go build -p "$(nproc)" -trimpath -tags selinux,notest,grpcnotrace -ldflags "$ld" \
    -o "$out.tmp/" "${pkgs[@]}")
  # kwok v0.8.0 ships no built-in stages; its own stage files live in the module.
  local dir
  dir=$(go mod download -json "sigs.k8s.io/kwok@$KWOK_VERSION" | python3 -c 'import json,sys; print(json.load(sys.stdin)["Dir"])')
  cp -r "$dir/kustomize/stage" "$out.tmp/kwok-stages"
  chmod -R u+w "$out.tmp/kwok-stages"
  rm -rf "$out"; mv "$out.tmp" "$out"
}

# `build.sh helm` or `build.sh kwok` (make push, make release): they come with Kubernetes' build.
build_helm() { build_kubernetes; }
build_kwok() { build_kubernetes; }

build_etcd() {
  local v=$ETCD_VERSION out="$CACHE/bin/etcd-$ETCD_VERSION"
  if have_all "$out" etcd; then log "etcd $v: cached"; return; fi
  local mod="$CACHE/src/etcd-$v"
  wrapper_module "$mod" multinode.dev/localcluster/etcd
  # server/v3 replaces its sibling modules with ../api etc.; use the published ones instead.
  for m in go.etcd.io/etcd/api/v3 go.etcd.io/etcd/client/pkg/v3 go.etcd.io/etcd/client/v3 go.etcd.io/etcd/pkg/v3; do
    (cd "$mod" && go mod edit -replace "$m=$m@$v")
  done
  log "etcd $v: resolving and compiling"
  (cd "$mod" && go get "go.etcd.io/etcd/server/v3@$v")
  mkdir -p "$out.tmp"
  (cd "$mod" && go build -p "$(nproc)" -trimpath -ldflags "-s -w" -o "$out.tmp/etcd" go.etcd.io/etcd/server/v3)
  rm -rf "$out"; mv "$out.tmp" "$out"
}

# ---- real nodes: container runtime, network, DNS -------------------------------------------------------

# Debian packages the real nodes need: iptables/nftables for kube-proxy and the kubelet, libseccomp for
# runc, debootstrap for the image root filesystems.
build_debs() {
  local need=()
  command -v iptables >/dev/null || need+=(iptables)
  command -v nft >/dev/null || need+=(nftables)
  command -v debootstrap >/dev/null || need+=(debootstrap)
  command -v pkg-config >/dev/null || need+=(pkg-config)
  [ -e /usr/include/seccomp.h ] || need+=(libseccomp-dev)
  if [ ${#need[@]} -eq 0 ]; then log "debian packages: installed"; return; fi
  log "debian packages: installing ${need[*]}"
  [ "$(id -u)" -eq 0 ] || { log "not root: cannot apt-get install ${need[*]}"; return 1; }
  DEBIAN_FRONTEND=noninteractive apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
}

# go_build NAME VERSION MODULE TAGS LDFLAGS PKG... — build PKGs of MODULE@VERSION in a wrapper module into
# $CACHE/bin/NAME-VERSION/ (binary names are the packages' last path element).
go_build() {
  local name=$1 v=$2 module=$3 tags=$4 ld=$5; shift 5
  local out="$CACHE/bin/$name-$v" mod="$CACHE/src/$name-$v" bins=()
  for p in "$@"; do bins+=("${p##*/}"); done
  if have_all "$out" "${bins[@]}"; then log "$name $v: cached"; return; fi
  wrapper_module "$mod" "multinode.dev/localcluster/$name"
  log "$name $v: resolving and compiling ${bins[*]}"
  (cd "$mod" && go get "$module@$v")
  mkdir -p "$out.tmp"
  (cd "$mod" && go build -p "$(nproc)" -trimpath -tags "$tags" -ldflags "-s -w $ld" -o "$out.tmp/" "$@")
  rm -rf "$out"; mv "$out.tmp" "$out"
}

build_containerd() {
  local m=github.com/containerd/containerd/v2
  go_build containerd "$CONTAINERD_VERSION" $m no_btrfs,no_devmapper,no_zfs \
    "-X $m/version.Version=$CONTAINERD_VERSION" $m/cmd/containerd $m/cmd/containerd-shim-runc-v2 $m/cmd/ctr
}

# runc needs cgo for seccomp (libseccomp-dev from build_debs).
build_runc() {
  CGO_ENABLED=1 go_build runc "$RUNC_VERSION" github.com/opencontainers/runc seccomp \
    "-X main.version=${RUNC_VERSION#v}" github.com/opencontainers/runc
}

build_cni() {
  local m=github.com/containernetworking/plugins/plugins
  go_build cni-plugins "$CNI_PLUGINS_VERSION" github.com/containernetworking/plugins "" "" \
    $m/main/bridge $m/ipam/host-local $m/main/loopback $m/meta/portmap
}

# local_main NAME VERSION SRC_DIR OUTPUT MODULE@VERSION [LDFLAGS] — build our own main package (SRC_DIR/*.go)
# against a published module into $CACHE/bin/NAME-VERSION-<hash of the sources>/OUTPUT.
local_main() {
  local name=$1 v=$2 src=$3 output=$4 require=$5 ld=${6:-} sum
  sum=$(cat "$src"/*.go | sha256sum | cut -c1-12)
  local out="$CACHE/bin/$name-$v-$sum" mod="$CACHE/src/$name-$v-$sum"
  if have_all "$out" "$output"; then log "$name $v-$sum: cached"; return; fi
  wrapper_module "$mod" "multinode.dev/localcluster/$name"
  cp "$src"/*.go "$mod/"
  log "$name $v-$sum: resolving and compiling"
  (cd "$mod" && go get "$require" && go mod tidy)
  mkdir -p "$out.tmp"
  (cd "$mod" && go build -p "$(nproc)" -trimpath -ldflags "-s -w $ld" -o "$out.tmp/$output" .)
  rm -rf "$out"; mv "$out.tmp" "$out"
}

# tools/localcluster/coredns: CoreDNS with just the plugins the local cluster's Corefile names.
build_coredns() {
  local_main coredns "$COREDNS_VERSION" "$here/coredns" coredns "github.com/coredns/coredns@$COREDNS_VERSION"
}

# ---- the cluster's OCI registry, the push tool, the workflow linter ------------------------------------

# tools/localcluster/registry: distribution's registry server with the filesystem storage driver only. Every
# local cluster runs one on loopback; real nodes pull the images `make push` puts there.
build_registry() {
  local m=github.com/distribution/distribution/v3
  local_main registry "$DISTRIBUTION_VERSION" "$here/registry" registry "$m@$DISTRIBUTION_VERSION" \
    "-X $m/version.version=$DISTRIBUTION_VERSION"
}

# crane pushes the images (from OCI layouts) for `make push` and `make release`, and reads them back in tests.
build_crane() {
  local m=github.com/google/go-containerregistry
  go_build crane "$GO_CONTAINERREGISTRY_VERSION" $m "" "-X $m/cmd/crane/cmd.Version=$GO_CONTAINERREGISTRY_VERSION" \
    $m/cmd/crane
}

# actionlint checks .github/workflows in `make lint` (the release workflow cannot run here).
build_actionlint() {
  go_build actionlint "$ACTIONLINT_VERSION" github.com/rhysd/actionlint "" \
    "-X github.com/rhysd/actionlint.version=$ACTIONLINT_VERSION" github.com/rhysd/actionlint/cmd/actionlint
}

# syft writes the SBOM of a release's image (`make release`): the Debian packages and Python distributions
# it holds, read from the image's OCI layout.
build_syft() {
  go_build syft "$SYFT_VERSION" github.com/anchore/syft "" "-X main.version=$SYFT_VERSION" \
    github.com/anchore/syft/cmd/syft
}

# The pod sandbox's pause process, from the Kubernetes source in the module cache (registry.k8s.io cannot be
# reached from here).
build_pause() {
  local out="$CACHE/bin/pause-$KUBE_VERSION"
  if have_all "$out" pause; then log "pause $KUBE_VERSION: cached"; return; fi
  local dir
  dir=$(go mod download -json "k8s.io/kubernetes@$KUBE_VERSION" | python3 -c 'import json,sys; print(json.load(sys.stdin)["Dir"])')
  mkdir -p "$out.tmp"
  gcc -Os -static -DVERSION="$KUBE_VERSION" -o "$out.tmp/pause" "$dir/build/pause/linux/pause.c"
  rm -rf "$out"; mv "$out.tmp" "$out"
}

# Our fake device plugin (tools/localcluster/deviceplugin): GPUs and RDMA devices the way real plugins
# advertise them. Keyed by the kubelet API version and the source's hash.
build_deviceplugin() {
  local_main deviceplugin "$KUBE_VERSION" "$here/deviceplugin" fake-device-plugin "k8s.io/kubelet@v0.${KUBE_VERSION#v1.}"
}

# kstatus (tools/localcluster/kstatus): cli-utils' health rules, which Flux uses, run on objects the tests read.
build_kstatus() {
  local_main kstatus "$CLI_UTILS_VERSION" "$here/kstatus" kstatus "sigs.k8s.io/cli-utils@$CLI_UTILS_VERSION"
}

# The gang schedulers' CRDs (spec.scheduling.volcano / coscheduling tests): no scheduler is built, only the
# CRDs of their PodGroups, into $CACHE/bin/gang-crds-<volcano>-<scheduler-plugins>/. volcano.sh/apis ships
# Go types only (volcano.sh/volcano, which has the YAML, is not on the module proxy), so its CRDs are
# generated with controller-gen, as Volcano's own hack/generate-yaml.sh does; scheduler-plugins ships its
# CRD YAML in config/crd/bases.
build_gangcrds() {
  local out="$CACHE/bin/gang-crds-$VOLCANO_APIS_VERSION-$SCHEDULER_PLUGINS_VERSION"
  local gen_dir="$CACHE/bin/controller-gen-$CONTROLLER_TOOLS_VERSION"
  if [ -f "$out/scheduling.volcano.sh_podgroups.yaml" ] && [ -f "$out/scheduling.x-k8s.io_podgroups.yaml" ]; then
    log "gang CRDs $VOLCANO_APIS_VERSION $SCHEDULER_PLUGINS_VERSION: cached"; return
  fi
  if ! have_all "$gen_dir" controller-gen; then
    log "controller-gen $CONTROLLER_TOOLS_VERSION: compiling"
    mkdir -p "$gen_dir.tmp"
    GOBIN="$gen_dir.tmp" go install -trimpath -ldflags "-s -w" \
      "sigs.k8s.io/controller-tools/cmd/controller-gen@$CONTROLLER_TOOLS_VERSION"
    rm -rf "$gen_dir"; mv "$gen_dir.tmp" "$gen_dir"
  fi
  local mod="$CACHE/src/volcano-apis-$VOLCANO_APIS_VERSION" pkg=volcano.sh/apis/pkg/apis/scheduling/v1beta1
  wrapper_module "$mod" multinode.dev/localcluster/volcanoapis
  printf 'package volcanoapis\n\nimport _ "%s"\n' "$pkg" > "$mod/imports.go"
  (cd "$mod" && go get "volcano.sh/apis@$VOLCANO_APIS_VERSION")
  rm -rf "$out.tmp"; mkdir -p "$out.tmp"
  (cd "$mod" && "$gen_dir/controller-gen" crd:crdVersions=v1 "paths=$pkg" "output:crd:dir=$out.tmp")
  local dir
  dir=$(go mod download -json "sigs.k8s.io/scheduler-plugins@$SCHEDULER_PLUGINS_VERSION" |
    python3 -c 'import json,sys; print(json.load(sys.stdin)["Dir"])')
  cp "$dir/config/crd/bases/scheduling.x-k8s.io_podgroups.yaml" "$out.tmp/"
  chmod -R u+w "$out.tmp"
  rm -rf "$out"; mv "$out.tmp" "$out"
}

# Flux's source-, kustomize- and helm-controller, and their CRDs, for the GitOps test, into
# $CACHE/bin/flux-<source>-<kustomize>-<helm>/. Each is built from its own module's source: its go.mod points
# its api module at ./api, which the module proxy's zip leaves out (a module of its own), so that replace is
# dropped and the published api module of the version go.mod requires is used.
build_flux() {
  local out="$CACHE/bin/flux-$FLUX_SOURCE_CONTROLLER_VERSION-$FLUX_KUSTOMIZE_CONTROLLER_VERSION-$FLUX_HELM_CONTROLLER_VERSION"
  local bins=(source-controller kustomize-controller helm-controller)
  if have_all "$out" "${bins[@]}"; then log "flux: cached"; return; fi
  rm -rf "$out.tmp"; mkdir -p "$out.tmp/crds"
  local name v dir mod
  for name in "${bins[@]}"; do
    case $name in
      source-controller) v=$FLUX_SOURCE_CONTROLLER_VERSION ;;
      kustomize-controller) v=$FLUX_KUSTOMIZE_CONTROLLER_VERSION ;;
      helm-controller) v=$FLUX_HELM_CONTROLLER_VERSION ;;
    esac
    dir=$(go mod download -json "github.com/fluxcd/$name@$v" | python3 -c 'import json,sys; print(json.load(sys.stdin)["Dir"])')
    mod="$CACHE/src/flux-$name-$v"
    rm -rf "$mod"; cp -r "$dir" "$mod"; chmod -R u+w "$mod"
    (cd "$mod" && go mod edit -dropreplace "github.com/fluxcd/$name/api")
    log "flux $name $v: resolving and compiling"
    (cd "$mod" && go build -p "$(nproc)" -trimpath -ldflags "-s -w" -o "$out.tmp/$name" .)
    cp "$dir"/config/crd/bases/*.yaml "$out.tmp/crds/"
  done
  chmod -R u+w "$out.tmp"
  rm -rf "$out"; mv "$out.tmp" "$out"
}

# Optional, for the peer benchmarks only: a Go controller `manager` and the CRDs of its module.
# build_peer <name> <version> <module> <main package> <CRD folder in the module>
# A wrapper module, not `go install pkg@version`: that asks the proxy for the module's version list
# (deprecation check), which this proxy refuses for sigs.k8s.io/jobset.
build_peer() {
  local name=$1 v=$2 module=$3 main=$4 crds=$5
  local out="$CACHE/bin/$name-$v" mod="$CACHE/src/$name-$v"
  if have_all "$out" manager && [ -d "$out/crds" ]; then log "$name $v: cached"; return; fi
  wrapper_module "$mod" "multinode.dev/localcluster/$name"
  log "$name $v: resolving and compiling (a few minutes with empty Go caches on 2 cores)"
  (cd "$mod" && go get "$module@$v")
  mkdir -p "$out.tmp/crds"
  (cd "$mod" && go build -p "$(nproc)" -trimpath -ldflags "-s -w" -o "$out.tmp/manager" "$main")
  local dir
  dir=$(cd "$mod" && go list -m -f '{{.Dir}}' "$module")
  cp "$dir/$crds"/*.yaml "$out.tmp/crds/"
  chmod -R u+w "$out.tmp/crds"
  rm -rf "$out"; mv "$out.tmp" "$out"
}

# JobSet (the base of Kubeflow Trainer v2): no replaces, CRDs from config/components/crd/bases.
build_jobset() {
  build_peer jobset "$JOBSET_VERSION" sigs.k8s.io/jobset sigs.k8s.io/jobset config/components/crd/bases
}

# Kubeflow Training Operator v1 (the PyTorchJob controller): go 1.22, no replaces; CRDs from
# manifests/base/crds.
build_kubeflow() {
  build_peer kubeflow-training-operator "$KUBEFLOW_TRAINING_OPERATOR_VERSION" github.com/kubeflow/training-operator \
    github.com/kubeflow/training-operator/cmd/training-operator.v1 manifests/base/crds
}

# Kueue: its controller manager and CRDs, for the test of the operator's Kueue integration
# (tests/integration/controller/test_kueue.py; `make peers`, which `make test` runs, builds it).
build_kueue() {
  build_peer kueue "$KUEUE_VERSION" sigs.k8s.io/kueue sigs.k8s.io/kueue/cmd/kueue config/components/crd/bases
}

# What is built once per version is shared by every clone on the machine, like Go's own caches: a clone that
# has no bin/ or images/ of its own yet (a fresh one) links them, and the trainer env, into
# $MULTINODE_BUILD_CACHE (default ~/.cache/multinode), so it builds only what no clone built before. Every
# entry is keyed by its version or its inputs, and written to a temporary name first. A clone that has them
# as folders keeps its own; MULTINODE_CACHE_DIR (a cache elsewhere) or MULTINODE_BUILD_CACHE=none shares nothing.
share_caches() {
  local shared=${MULTINODE_BUILD_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/multinode}
  if [ -n "${MULTINODE_CACHE_DIR:-}" ] || [ "$shared" = none ]; then return 0; fi
  share "$CACHE/bin" "$shared/localcluster/bin"
  share "$CACHE/images" "$shared/localcluster/images"
  share "$root/.cache/trainer-env" "$shared/trainer-env"
}

share() {  # LINK TARGET: LINK -> TARGET, unless LINK exists (a folder of the clone's own, or the link)
  if [ -e "$1" ] || [ -L "$1" ]; then return 0; fi
  mkdir -p "$2" "$(dirname "$1")"
  ln -s "$2" "$1" 2>/dev/null || [ -L "$1" ]  # another build linked it first
}

share_caches
components=("$@")
[ ${#components[@]} -gt 0 ] ||
  components=(debs etcd registry crane kubernetes containerd runc cni coredns pause deviceplugin gangcrds)
start=$(date +%s)
for c in "${components[@]}"; do
  t=$(date +%s)
  "build_$c"
  log "$c: $(( $(date +%s) - t ))s"
done
log "done in $(( $(date +%s) - start ))s; binaries under $CACHE/bin"
