#!/usr/bin/env bash
# What a lent GPU machine needs from here, under the device tool's carry limit (64 MiB in all):
# the programs stripped (each holds every kernel's fatbin, ~60 MiB), the shared libraries they
# link that the GPU image lacks, in one .gpu/pkg.tar.xz whose dictionary spans the programs (their
# fatbins are the same bytes: ~190 MiB stripped pack into ~15), and Fashion-MNIST's four files
# (.gpu/data) for bench/gpu_accuracy.sh. On the GPU machine, carrying .gpu/pkg.tar.xz and .gpu/data:
#   bash bench/gpu_pack.sh --unpack && BUILD=.gpu/new bash bench/gpu_device.sh
# (--unpack uses tar's xz, else Python's lzma).   bash bench/gpu_pack.sh [BUILD]
set -euo pipefail
cd "$(dirname "$0")/.."
if [[ ${1:-} == --unpack ]]; then
  tar -C .gpu -xJf .gpu/pkg.tar.xz 2>/dev/null ||
    python3 -c 'import tarfile; tarfile.open(".gpu/pkg.tar.xz").extractall(".gpu")'
  exit 0
fi
B=${1:-build}
mkdir -p .gpu/lib .gpu/new .gpu/data
grep -qx '/.gpu/' .git/info/exclude 2>/dev/null || echo /.gpu/ >> .git/info/exclude
for l in libz.so.1 libibverbs.so.1 libjpeg.so.62 libpng16.so.16 libnl-route-3.so.200 libnl-3.so.200; do
  cp -L "/lib/x86_64-linux-gnu/$l" .gpu/lib/
done
for b in test-gpu-runner ddprt-train ddprt-bench-kernels ddprt-bench ddprt-launch; do strip -o ".gpu/new/$b" "$B/$b"; done
tar -C .gpu -cf - new lib | xz -T1 -6 --lzma2=dict=256MiB > .gpu/pkg.tar.xz
cp /usr/share/datasets/fashion-mnist/*-ubyte.gz .gpu/data/ 2>/dev/null ||
  echo "gpu_pack: no Fashion-MNIST (apt-get install dataset-fashion-mnist): gpu_accuracy.sh needs it" >&2
du -sh .gpu/pkg.tar.xz .gpu/data
