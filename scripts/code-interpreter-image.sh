#!/bin/sh
# Builds the code-interpreter image that `code-interpreter-v1` (E2B's default template, and the
# native `{"template": "code-interpreter-v1"}`) runs on once the store has it: Debian 12 with
# Python 3 and the data stack E2B's code-interpreter template lists (numpy, pandas, matplotlib,
# seaborn, scipy, scikit-learn, sympy, requests, beautifulsoup4, openpyxl, …), Node.js and bash,
# all from Debian's own packages (debootstrap; no public container registry, no PyPI), made an
# image by `cordon image build` from images/code-interpreter/Dockerfile.
#
#   sudo scripts/code-interpreter-image.sh [--data-dir DIR] [--mirror URL]
#
# It takes minutes (about 400 MB of packages are downloaded from the Debian mirror) and needs
# root (debootstrap). The image is `code-interpreter:latest` in the server's store (the data
# directory `cordon serve` uses: the same --data-dir, or the default); running servers pick it
# up at their next code-interpreter-v1 create. Until it is built, code-interpreter-v1 runs on
# the host's system directories and its create answers say so (`note`).
set -eu
here=$(cd "$(dirname "$0")/.." && pwd)
data_args=""
mirror=""
while [ $# -gt 0 ]; do
  case "$1" in
    --data-dir) data_args="--data-dir $2"; shift 2 ;;
    --mirror) mirror=$2; shift 2 ;;
    -h|--help) sed -n '2,16p' "$0"; exit 0 ;;
    *) echo "code-interpreter-image.sh: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
done
[ "$(id -u)" -eq 0 ] || { echo "code-interpreter-image.sh: needs root (debootstrap); run it with sudo" >&2; exit 2; }
command -v debootstrap >/dev/null || { echo "code-interpreter-image.sh: debootstrap is missing: apt-get install debootstrap" >&2; exit 2; }
cordon=${CORDON:-$(command -v cordon || echo "$here/target/release/cordon")}
[ -x "$cordon" ] || { echo "code-interpreter-image.sh: no cordon binary (install it, or set CORDON=path)" >&2; exit 2; }
# The mirror apt already uses, so that a host behind its own mirror needs nothing else.
if [ -z "$mirror" ]; then
  mirror=$(sed -n 's/^URIs: *\(http[^ ]*debian\)$/\1/p' /etc/apt/sources.list.d/debian.sources 2>/dev/null | head -1)
  [ -n "$mirror" ] || mirror=http://deb.debian.org/debian
fi
packages="bash coreutils procps less curl git python3 python3-pip python3-venv \
python3-numpy python3-pandas python3-matplotlib python3-seaborn python3-scipy python3-sklearn \
python3-sympy python3-requests python3-bs4 python3-openpyxl python3-xlrd python3-pil \
python3-ipython python3-nltk python3-plotly python-is-python3 nodejs npm"
work=$(mktemp -d)
root=$work/ctx/rootfs
cleanup() {
  umount "$root/proc" 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT
mkdir -p "$work/ctx"
echo "1/4 debootstrap: a minimal Debian 12 (bookworm) root from $mirror"
debootstrap --variant=minbase --include=ca-certificates bookworm "$root" "$mirror" >"$work/debootstrap.log" 2>&1 \
  || { tail -30 "$work/debootstrap.log" >&2; echo "code-interpreter-image.sh: debootstrap failed (log above)" >&2; exit 1; }
echo "2/4 apt-get install in it: Python 3, the data stack, Node.js and npm (a few minutes)"
cp /etc/resolv.conf "$root/etc/resolv.conf"
mount -t proc proc "$root/proc"
# shellcheck disable=SC2086 # the package list is split on purpose
{ chroot "$root" apt-get update -q && DEBIAN_FRONTEND=noninteractive chroot "$root" \
    apt-get install -y -q --no-install-recommends $packages; } >"$work/apt.log" 2>&1 \
  || { tail -30 "$work/apt.log" >&2; echo "code-interpreter-image.sh: apt-get install failed (log above)" >&2; exit 1; }
umount "$root/proc"
echo "3/4 trimming: apt's caches and lists, documentation"
chroot "$root" apt-get clean
rm -rf "$root/var/lib/apt/lists/"* "$root/usr/share/doc" "$root/usr/share/man" "$root/etc/resolv.conf"
: >"$root/etc/resolv.conf"
mkdir -p "$root/home/user"
cp "$here/images/code-interpreter/Dockerfile" "$work/ctx/Dockerfile"
echo "4/4 cordon image build -t code-interpreter:latest"
# shellcheck disable=SC2086 # data_args is split on purpose
"$cordon" image build -t code-interpreter:latest $data_args "$work/ctx"
echo "done: code-interpreter-v1 now runs on code-interpreter:latest (cordon image ls shows it)"
