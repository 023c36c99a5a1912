#!/bin/bash
# Build ncclsim: NCCL's own topology / graph search / tuning code (unmodified sources) plus the
# harness in harness/, with g++ only (no nvcc, no CUDA driver, no GPU).
#
#   ./build.sh /path/to/nccl [output-binary]
#
# CUDA: NCCL's internal headers include cuda.h / cuda_runtime.h; harness/cuda_stub provides the
# few types/declarations they need. Nothing is linked from CUDA; no GPU or driver is used.
set -euo pipefail
NCCL=${1:?usage: build.sh /path/to/nccl-source [output]}
NCCL=$(cd "$NCCL" && pwd)
HERE=$(cd "$(dirname "$0")" && pwd)
OUT=${2:-$HERE/ncclsim}
BUILD=$(mktemp -d "${TMPDIR:-/tmp}/ncclsim-build.XXXXXX")
trap 'rm -rf "$BUILD"' EXIT
JOBS=${JOBS:-$(nproc)}

# Version -> nccl.h (as src/Makefile does)
eval "$(sed -n 's/^\(NCCL_[A-Z]*\) *:= *\(.*\)$/\1="\2"/p' "$NCCL/makefiles/version.mk")"
NCCL_VERSION=$(printf "%d%02d%02d" "$NCCL_MAJOR" "$NCCL_MINOR" "$NCCL_PATCH")
mkdir -p "$BUILD/include"
sed -e "s/\${nccl:Major}/$NCCL_MAJOR/g" -e "s/\${nccl:Minor}/$NCCL_MINOR/g" -e "s/\${nccl:Patch}/$NCCL_PATCH/g" \
    -e "s/\${nccl:Suffix}/${NCCL_SUFFIX:-}/g" -e "s/\${nccl:Version}/$NCCL_VERSION/g" \
    "$NCCL/src/nccl.h.in" > "$BUILD/include/nccl.h"

# Default: the stub CUDA headers of harness/cuda_stub (types and declarations only; no CUDA needed).
# NCCLSIM_CUDA_INC=/usr/local/cuda/include uses a real CUDA toolkit's headers instead (same results).
if [ -n "${NCCLSIM_CUDA_INC:-}" ]; then
  CUDA_INC=$NCCLSIM_CUDA_INC
  CUDA_MAJOR=$(sed -n 's/^#define CUDA_VERSION \([0-9]*\).*/\1/p' "$CUDA_INC/cuda.h" | head -1)
  CUDA_FLAGS="-I $CUDA_INC -I $CUDA_INC/cccl -DCUDA_MAJOR=$((CUDA_MAJOR / 1000)) -DCUDA_MINOR=$(((CUDA_MAJOR % 1000) / 10))"
  echo "ncclsim: CUDA headers from $CUDA_INC (declarations only)"
else
  CUDA_FLAGS="-I $HERE/harness/cuda_stub -DCUDA_MAJOR=13 -DCUDA_MINOR=0"
  echo "ncclsim: stub CUDA headers ($HERE/harness/cuda_stub)"
fi

CXXFLAGS="-std=c++17 -O2 -g0 -fPIC -DNCCL_OS_LINUX -ffunction-sections -fdata-sections -Wno-deprecated-declarations \
  -I $BUILD/include -I $NCCL/src -I $NCCL/src/include -I $NCCL/src/include/plugin -I $NCCL/src/graph \
  -I $HERE/harness $CUDA_FLAGS"

# NCCL sources used unmodified. ncclGetAlgoInfo (enqueue.cc) and ncclNvlsTuning (transport/nvls.cc)
# come with files that hold much else: --gc-sections keeps only what is reached.
SRCS="graph/xml.cc graph/topo.cc graph/paths.cc graph/search.cc graph/connect.cc graph/trees.cc graph/tuning.cc
      graph/rings.cc enqueue.cc transport/nvls.cc collectives.cc misc/utils.cc"
pids=()
for s in $SRCS; do
  o="$BUILD/$(echo "$s" | tr / _).o"
  g++ $CXXFLAGS -c "$NCCL/src/$s" -o "$o" &
  pids+=($!)
  while [ "$(jobs -rp | wc -l)" -ge "$JOBS" ]; do sleep 0.2; done
done
for h in stubs machine main; do
  g++ $CXXFLAGS -c "$HERE/harness/$h.cc" -o "$BUILD/harness_$h.o" &
  pids+=($!)
  while [ "$(jobs -rp | wc -l)" -ge "$JOBS" ]; do sleep 0.2; done
done
for p in "${pids[@]}"; do wait "$p"; done
# --wrap: getHostHash() (misc/utils.cc) answers per rank thread, so that ranks of several hosts of one
# MNNVL clique run in this one process (harness/main.cc).
g++ -o "$OUT" "$BUILD"/*.o -Wl,--gc-sections -Wl,--wrap=_Z11getHostHashv -lpthread
echo "ncclsim: built $OUT (NCCL $NCCL_MAJOR.$NCCL_MINOR.$NCCL_PATCH)"
