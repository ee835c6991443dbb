#!/usr/bin/env bash
# make test-fresh: the README's two commands (make run, make test) from a fresh git clone
# of HEAD, in a pristine minimal Debian 12 chroot that has only git, make, gcc and
# libc6-dev (debootstrap --variant=minbase), as a new user on a fresh machine would run
# them. Everything else (zlib1g-dev, the data set, ...) must come from make itself.
# The base system is cached as a tar in $CACHE (first run: debootstrap downloads it);
# downloaded .debs are cached in $CACHE/archives (the package lists are not: apt-get
# update runs in every fresh root). Root only. Mounts are undone on every exit path.
set -euo pipefail
cd "$(dirname "$0")/.."
repo=$PWD
CACHE=${CACHE:-/var/cache/ddprt-test-fresh}
RUN_ARGS=${RUN_ARGS---epochs 1}
# Parallel make in the fresh root (MAKEFLAGS, as a user's environment may set it): the
# commands stay the README's; JOBS=1 for a serial build.
JOBS=${JOBS:-$(nproc)}
say() { echo "test-fresh: $*"; }
[ "$(id -u)" = 0 ] || { say "needs root (debootstrap, chroot, mounts)"; exit 1; }

# The Debian mirror this machine's apt uses (deb822 .sources or one-line .list).
mirror=$({ cat /etc/apt/sources.list /etc/apt/sources.list.d/*.list /etc/apt/sources.list.d/*.sources 2>/dev/null || true; } |
  awk '/^deb / && $3 ~ /^bookworm$/ {print $2; exit} /^URIs:/ {u=$2} /^Suites:/ && / bookworm( |$)/ && u !~ /security/ {print u; exit}')
mirror=${mirror:-http://deb.debian.org/debian}
base=$CACHE/bookworm-minbase.tar
mkdir -p "$CACHE/archives"
if [ ! -s "$base" ]; then
  if ! command -v debootstrap >/dev/null; then
    apt-get install -y -q debootstrap || { apt-get update -q && apt-get install -y -q debootstrap; }
  fi
  stage=$CACHE/stage.$$
  say "building the base system with debootstrap from $mirror (once; cached in $base)"
  rm -rf "$stage"
  debootstrap --variant=minbase --include=git,make,gcc,libc6-dev bookworm "$stage" "$mirror" >"$CACHE/debootstrap.log" 2>&1 ||
    { tail -20 "$CACHE/debootstrap.log"; rm -rf "$stage"; say "debootstrap failed (log: $CACHE/debootstrap.log)"; exit 1; }
  rm -f "$stage"/var/cache/apt/archives/*.deb
  tar -C "$stage" -cf "$base.tmp" . && mv "$base.tmp" "$base"
  rm -rf "$stage"
fi

root=$(mktemp -d /var/tmp/ddprt-fresh.XXXXXX)
mounted=()
cleanup() {
  local rc=$? i p left
  # Interrupted: stop what still runs inside the root (only processes rooted there;
  # again while make was still forking compilers).
  for ((i = 0; i < 10; i++)); do
    left=0
    for p in /proc/[0-9]*; do
      [ "$(readlink "$p/root" 2>/dev/null)" = "$root" ] && kill -9 "${p#/proc/}" 2>/dev/null && left=1
    done
    [ $left = 0 ] && break
    sleep 0.2
  done
  for ((i = ${#mounted[@]} - 1; i >= 0; i--)); do
    umount "${mounted[i]}" 2>/dev/null || umount -l "${mounted[i]}" || true
  done
  # Only when nothing is mounted below it any more: never delete through a mount.
  if ! grep -q " $root/" /proc/mounts; then rm -rf --one-file-system "$root"; else say "left $root (still mounted)"; fi
  exit $rc
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM
mnt() { mount "$@"; mounted+=("${@: -1}"); }

tar -C "$root" -xf "$base"
mnt -t proc proc "$root/proc"
mnt -t sysfs sysfs "$root/sys"
mnt -t tmpfs -o mode=1777 tmpfs "$root/dev/shm"
mnt -t devpts -o newinstance,ptmxmode=0666 devpts "$root/dev/pts"
mnt --bind "$CACHE/archives" "$root/var/cache/apt/archives"
cp /etc/resolv.conf "$root/etc/resolv.conf" 2>/dev/null || true
# What the Debian installer writes and debootstrap does not: "localhost" must resolve.
printf '127.0.0.1\tlocalhost\n::1\t\tlocalhost ip6-localhost ip6-loopback\n' >"$root/etc/hosts"
# The mirror this machine uses, as debootstrap set it up.
printf 'deb %s bookworm main\n' "$mirror" >"$root/etc/apt/sources.list"

# A fresh clone of HEAD (what is committed; uncommitted changes are not tested).
git -C "$repo" diff --quiet HEAD 2>/dev/null || say "note: uncommitted changes are not part of the test (HEAD is)"
git -C "$repo" bundle create -q "$root/root/ddprt.bundle" HEAD 2>/dev/null ||
  git -C "$repo" bundle create "$root/root/ddprt.bundle" HEAD
in_root() {
  chroot "$root" /usr/bin/env -i HOME=/root TERM=dumb LANG=C.UTF-8 \
    PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin MAKEFLAGS="-j$JOBS" /bin/bash -c "$1"
}
in_root 'git -c advice.detachedHead=false clone -q /root/ddprt.bundle /root/ddprt && git -C /root/ddprt log --oneline -1'
say "installed in the fresh root: $(in_root "dpkg-query -W -f='\${Package} ' git make gcc libc6-dev zlib1g-dev 2>/dev/null")"

run_timed() { # name command
  local t0 t1 rc=0
  say "\$ $1"
  t0=$(date +%s.%N)
  # In the background: bash runs a trap (SIGTERM from CI's timeout) only between
  # commands, and `wait` is one it interrupts.
  in_root "cd /root/ddprt && $2" &
  wait $! || rc=$?
  t1=$(date +%s.%N)
  times+=("$(awk -v n="$1" -v a="$t0" -v b="$t1" -v rc="$rc" 'BEGIN {printf "%-40s %7.1f s  exit %d", n, b - a, rc}')")
  return $rc
}
times=()
status=0
run_timed "make run RUN_ARGS='$RUN_ARGS'" "make run RUN_ARGS='$RUN_ARGS'" || status=1
run_timed "make test" "make test" || status=1
say "summary (fresh Debian 12 minbase chroot, clone of $(git -C "$repo" rev-parse --short HEAD), MAKEFLAGS=-j$JOBS):"
for t in "${times[@]}"; do echo "  $t"; done
[ $status = 0 ] && say "PASS" || say "FAIL"
exit $status
