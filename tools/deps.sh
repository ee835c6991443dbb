#!/bin/sh
# Installs the Debian packages of deps/debian.txt that are missing: as root with
# apt-get (apt-get update first when the install fails: a fresh machine has no package
# lists); otherwise prints the one command to run and fails. Quiet when nothing is
# missing. Usage: tools/deps.sh [KIND...] (default: required; CI: required optional ci).
# Not Debian (no dpkg-query): says so once and lets the build try.
set -u
cd "$(dirname "$0")/.." || exit 1
kinds=${*:-required}
list=deps/debian.txt
command -v dpkg-query >/dev/null 2>&1 || {
  echo "ddprt: not a Debian system: check that the equivalents of these are installed: $(awk '!/^#/ && NF {printf "%s ", $1}' $list)" >&2
  exit 0
}
need=
for k in $kinds; do
  for p in $(awk -v k="$k" '!/^#/ && $2 == k {print $1}' $list); do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || need="$need $p"
  done
done
[ -z "$need" ] && exit 0
if [ "$(id -u)" != 0 ]; then
  echo "ddprt: missing build dependencies; run: sudo apt-get install -y$need" >&2
  exit 1
fi
echo "ddprt: installing missing build dependencies:$need"
export DEBIAN_FRONTEND=noninteractive
# shellcheck disable=SC2086
apt-get install -y -q $need || { apt-get update -q && apt-get install -y -q $need; }
