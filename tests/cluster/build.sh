#!/usr/bin/env bash
# Builds the real Kubernetes control plane the tests run (docs/development.md, "A real control
# plane") into target/cluster/bin from the Go modules pinned here (go.mod and go.sum of ./kube,
# ./etcd and ./jobset): kube-apiserver, kube-controller-manager, kube-scheduler and kubectl
# v1.37.2, etcd v3.7.3 and the JobSet controller v0.12.0. A binary already built from the same
# go.sum is kept; Go's build cache makes a rebuild on the same machine take seconds.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
out="${1:-$here/../../target/cluster/bin}"
mkdir -p "$out"
out="$(cd "$out" && pwd)"

command -v go >/dev/null 2>&1 || {
  echo "go is missing: the real-cluster tests build Kubernetes from its Go modules; install Go 1.26 or later (https://go.dev/dl/) and put it on PATH" >&2
  exit 1
}
# The go lines say 1.26.0: never download another toolchain behind the user's back.
export GOTOOLCHAIN=local CGO_ENABLED=0
# The committed go.sum files are the checksums: with them, the checksum database is not needed
# (GOFLAGS=-mod=readonly refuses any module they do not name). GONOSUMDB is not set: where
# sum.golang.org is unreachable, `GOSUMDB=off bash tests/cluster/build.sh` still checks every
# module against go.sum.
export GOFLAGS="-mod=readonly -trimpath"

version=v1.37.2
ld="-s -w"
for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
  ld+=" -X $pkg.gitVersion=$version -X $pkg.gitMajor=1 -X $pkg.gitMinor=37 -X $pkg.gitTreeState=clean"
done

# build <module dir> <binary=package>...: skipped when the binaries exist and were built from this
# go.sum and this script.
build() {
  local dir="$1" stamp="$out/.$1.stamp" sum missing=0 pair
  shift
  sum="$(cat "$here/$dir/go.sum" "$here/$dir/go.mod" "$here/build.sh" | sha256sum | cut -d' ' -f1)"
  for pair in "$@"; do [ -x "$out/${pair%%=*}" ] || missing=1; done
  if [ $missing = 0 ] && [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$sum" ]; then
    return 0
  fi
  local start=$SECONDS
  echo "building ${*%%=*} in tests/cluster/$dir with $(go env GOVERSION) (cold, all three: about 16 minutes on 2 cores)"
  for pair in "$@"; do
    (cd "$here/$dir" && go build -p "$(nproc)" -ldflags "$ld" -o "$out/${pair%%=*}" "${pair#*=}")
  done
  echo "built in $((SECONDS - start)) s"
  echo "$sum" >"$stamp"
}

build kube kube-apiserver=k8s.io/kubernetes/cmd/kube-apiserver \
  kube-controller-manager=k8s.io/kubernetes/cmd/kube-controller-manager \
  kube-scheduler=k8s.io/kubernetes/cmd/kube-scheduler kubectl=k8s.io/kubernetes/cmd/kubectl
build etcd etcd=go.etcd.io/etcd/server/v3
build jobset jobset=sigs.k8s.io/jobset

# What the JobSet controller needs besides its binary, from the same module: its CRD, and its
# webhook configurations (with kustomize's patch: the pod webhooks select JobSet pods only).
jobset_src="$(cd "$here/jobset" && go list -m -f '{{.Dir}}' sigs.k8s.io/jobset)"
mkdir -p "$out/../jobset"
cp -f "$jobset_src"/config/components/crd/bases/*.yaml "$jobset_src"/config/components/webhook/manifests.yaml \
  "$out/../jobset/"
chmod u+w "$out"/../jobset/*
