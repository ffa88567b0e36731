#!/usr/bin/env bash
# Installs cordon's Debian package into a fresh Debian root and checks what it leaves there:
#
#   ./scripts/package-test.sh DEB        (as root; scripts/package-deb.sh makes DEB)
#   ./scripts/package-test.sh --prepare  only make the cached root (scripts/test.sh runs this
#                                        beside the release build)
#
# The root: `debootstrap --variant=minbase` of this host's release, plus systemd (so that
# `systemd-analyze verify` sees the unit as the target system would) and man-db (so that its
# Documentation= is checked too), fetched from the Debian mirror this host's apt uses — the only
# address this script reaches. It is made once into the cache (CORDON_PACKAGE_TEST_CACHE,
# default /var/cache/cordon-package-test; ~3 min) and copied for each run (seconds).
#
# In a chroot (its own mount namespace, /proc mounted there only), it checks:
#   - `apt-get install ./DEB` resolves and installs it; files, owners and modes (binaries 0755
#     root, unit, conffiles, completions, man pages, AppArmor profile); the system user cordon;
#     its data dir; the first API key in a root-only file, and the unit enabled;
#   - `cordon --version` runs there, and `systemd-analyze verify` accepts the unit;
#   - upgrades (the same .deb again, then a version bump made by package-deb.sh
#     --version-suffix from DEB's own binaries) keep /var/lib/cordon's contents, a changed
#     /etc/default/cordon and the key, and make no second key;
#   - `dpkg -r` keeps data, conffile and user; `dpkg --purge` then leaves the root as it was
#     before the install (every path, its type, mode, owner and contents), save dpkg's and apt's
#     own records and logs and the shadow tools' backups (/etc/passwd- …).
#   - then, installed again and booted under systemd-nspawn (systemd as its PID 1, its own
#     network namespace), cordon.service runs with its hardening and makes a sandbox through
#     the API: a command runs in it, a file goes in and out, the key is not in the journal, and
#     stopping the service leaves no process of the user cordon. Skipped, and said so, without
#     systemd-nspawn (package systemd-container).
# Exit status 0 when every check holds.
set -euo pipefail
cd "$(dirname "$0")/.."
prepare=false
case "${1:?usage: package-test.sh DEB | --prepare}" in
  --prepare) prepare=true ;;
  *) deb=$(realpath "$1"); [ -f "$deb" ] || { echo "package-test.sh: no file $deb" >&2; exit 1; } ;;
esac
[ "$(id -u)" -eq 0 ] || { echo "package-test.sh: needs root (debootstrap, chroot)" >&2; exit 1; }
command -v debootstrap >/dev/null || DEBIAN_FRONTEND=noninteractive apt-get install -y -qq debootstrap >/dev/null

arch=$(dpkg --print-architecture)
if ! $prepare && [ "$(dpkg-deb -f "$deb" Architecture)" != "$arch" ]; then
  echo "package-test.sh: $deb is for $(dpkg-deb -f "$deb" Architecture), this host is $arch" >&2
  exit 1
fi
# shellcheck disable=SC1091
suite=$(. /etc/os-release && echo "${VERSION_CODENAME:-}")
[ -n "$suite" ] || { echo "package-test.sh: no VERSION_CODENAME in /etc/os-release" >&2; exit 1; }
# The mirror apt already uses for this suite (deb822 .sources, then one-line .list).
mirror=$(awk -v s="$suite" '
  /^URIs:/ { u = $2 } /^Suites:/ { for (i = 2; i <= NF; i++) if ($i == s) { print u; exit } }
  /^$/ { u = "" }' /etc/apt/sources.list.d/*.sources 2>/dev/null || true)
[ -n "$mirror" ] || mirror=$(awk -v s="$suite" '$1 == "deb" && $3 == s { print $2; exit }' \
  /etc/apt/sources.list /etc/apt/sources.list.d/*.list 2>/dev/null || true)
[ -n "$mirror" ] || { echo "package-test.sh: no apt source for $suite in /etc/apt/sources.list*" >&2; exit 1; }

cache=${CORDON_PACKAGE_TEST_CACHE:-/var/cache/cordon-package-test}
base=$cache/$suite-$arch
mkdir -p "$cache"
exec 9>"$cache/lock"
flock 9
if [ ! -x "$base/usr/bin/systemd-analyze" ]; then
  echo "== debootstrap $suite from $mirror into $base (once)"
  rm -rf "$base.tmp"
  for try in 1 2 3; do
    debootstrap --variant=minbase --include=systemd,man-db "$suite" "$base.tmp" "$mirror" >"$cache/debootstrap.log" 2>&1 && break
    [ "$try" = 3 ] && { tail -20 "$cache/debootstrap.log" >&2; echo "package-test.sh: debootstrap failed 3 times" >&2; exit 1; }
    rm -rf "$base.tmp"; sleep 5
  done
  # Nothing below needs the downloaded .debs again.
  rm -f "$base.tmp"/var/cache/apt/archives/*.deb
  mv "$base.tmp" "$base"
fi
$prepare && exit 0
work=$(mktemp -d /tmp/cordon-package-test.XXXXXX)
trap 'rm -rf "$work"' EXIT
root=$work/root
cp -a "$base" "$root"
flock -u 9

fail() { echo "package-test.sh: $*" >&2; exit 1; }
# A command in the root: its own mount namespace with a /proc, gone when it exits.
in_root() {
  # shellcheck disable=SC2016 # expanded by that sh
  unshare --mount --fork -- sh -c 'mount -t proc proc "$0/proc" && exec chroot "$0" "$@"' "$root" \
    env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin HOME=/root LANG=C.UTF-8 DEBIAN_FRONTEND=noninteractive "$@"
}
# Every path with its type, mode, owner and, for files, contents, minus what only dpkg and apt
# keep about their own work.
snapshot() {
  (cd "$root" && find . -xdev \( -path ./proc -o -path ./dev -o -path ./tmp -o -path ./run \) -prune -o -printf '%p %y %m %u %g\n' |
    grep -vE '^\./(var/lib/dpkg/(status|status-old|available|lock[^ ]*|triggers/[^ ]*|diversions-old|statoverride-old)|var/log/(dpkg\.log|apt/[^ ]*|alternatives\.log)|var/cache/(apt|debconf|ldconfig)/[^ ]*|var/lib/apt/(extended_states|lists/[^ ]*)|etc/(passwd|group|shadow|gshadow|subuid|subgid)-|etc/ld\.so\.cache) ' |
    sort) >"$1"
  (cd "$root" && find . -xdev \( -path ./proc -o -path ./dev -o -path ./tmp -o -path ./run -o -path ./var/lib/dpkg -o -path ./var/log -o -path ./var/cache \) -prune -o -type f -print0 |
    grep -zvE '^\./(var/lib/apt/(extended_states|lists/.*)|etc/(passwd|group|shadow|gshadow|subuid|subgid)-|etc/ld\.so\.cache)$' |
    sort -z | xargs -0 md5sum) >>"$1"
}
mode_is() { # PATH MODE OWNER GROUP
  local got
  # Names as the root's own /etc/passwd and /etc/group give them.
  got=$(in_root stat -c '%a %U %G' "$1" 2>/dev/null) || fail "$1 is missing"
  [ "$got" = "$2 $3 $4" ] || fail "$1 is $got, expected $2 $3 $4"
}
# shellcheck disable=SC2016 # dpkg-query's format, not the shell's
installed_version() { in_root dpkg-query -W -f '${Version}' cordon 2>/dev/null || true; }

version=$(dpkg-deb -f "$deb" Version)
# man-db's cache as its dpkg trigger leaves it (CACHEDIR.TAG files…), so that the trigger
# running on install and purge is no difference; and no cat page of the pages that man formats
# (systemd-analyze verify does, to check Documentation=): man-db's cache, not the package's.
sed -i 's/^#NOCACHE$/NOCACHE/' "$root/etc/manpath.config"
in_root mandb -q
snapshot "$work/before"
cp "$deb" "$root/tmp/cordon.deb"

echo "== install $(basename "$deb") with apt"
# Recommends (python3) are left out: the check is about what this package itself leaves.
in_root apt-get install -y -q --no-install-recommends /tmp/cordon.deb >"$work/install.log" 2>&1 ||
  { cat "$work/install.log" >&2; fail "apt-get install ./cordon.deb failed"; }
[ "$(installed_version)" = "$version" ] || fail "cordon $version is not installed"
in_root dpkg --verify cordon >"$work/verify" 2>&1 || true
[ ! -s "$work/verify" ] || { cat "$work/verify" >&2; fail "dpkg --verify cordon found changed files"; }

for b in cordon cordon-wasm cordon-bench; do mode_is /usr/bin/$b 755 root root; done
mode_is /usr/lib/systemd/system/cordon.service 644 root root
mode_is /etc/default/cordon 644 root root
mode_is /etc/apparmor.d/cordon 644 root root
mode_is /usr/share/bash-completion/completions/cordon 644 root root
mode_is /usr/share/zsh/vendor-completions/_cordon 644 root root
mode_is /usr/share/fish/vendor_completions.d/cordon.fish 644 root root
mode_is /usr/share/doc/cordon/copyright 644 root root
for m in cordon cordon-serve cordon-run; do
  mode_is "/usr/share/man/man1/$m.1.gz" 644 root root
  gzip -t "$root/usr/share/man/man1/$m.1.gz" || fail "$m.1.gz is not gzip"
done
# Found by name; read by path, since man-db caches what it formats by name.
[ "$(in_root man -w cordon-serve)" = /usr/share/man/man1/cordon-serve.1.gz ] || fail "man does not find cordon-serve"
in_root man -P cat -l /usr/share/man/man1/cordon-serve.1.gz 2>/dev/null | grep -q -- '--listen' ||
  fail "man cordon-serve does not show --listen"
grep -q 'complete -F _cordon' "$root/usr/share/bash-completion/completions/cordon" || fail "the bash completion defines no completion for cordon"
grep -qx '/etc/default/cordon' "$root/var/lib/dpkg/info/cordon.conffiles" || fail "/etc/default/cordon is not a conffile"

pw=$(in_root getent passwd cordon) || fail "no user cordon"
IFS=: read -r _ _ uid gid _ home shell <<<"$pw"
{ [ "$uid" -lt 1000 ] && [ "$home" = /var/lib/cordon ] && [ "$shell" = /usr/sbin/nologin ]; } ||
  fail "user cordon is not a system user with home /var/lib/cordon and no shell: $pw"
[ "$(in_root getent group cordon | cut -d: -f3)" = "$gid" ] || fail "cordon's primary group is not the group cordon"
mode_is /var/lib/cordon 700 cordon cordon
mode_is /var/lib/cordon/initial-api-key 600 root root
grep -qE '^cdn_[0-9a-f]+$' "$root/var/lib/cordon/initial-api-key" || fail "the initial API key file holds no key"
keys=$(in_root runuser -u cordon -- env CORDON_DATA_DIR=/var/lib/cordon cordon keys list)
# One active key, the data directory's first, so an admin one (`… active admin`).
[ "$(grep -cE '\bactive([[:space:]]+admin)?$' <<<"$keys")" = 1 ] || fail "expected one active key after install: $keys"
grep -qE '\bactive[[:space:]]+admin$' <<<"$keys" || fail "the first key is not an admin key: $keys"
[ -L "$root/etc/systemd/system/multi-user.target.wants/cordon.service" ] || fail "cordon.service is not enabled"

out=$(in_root cordon --version) || fail "cordon --version failed in the root"
[[ "$out" == "cordon ${version%%+*}"* ]] || fail "cordon --version says $out, the package is $version"
echo "== systemd-analyze verify (in the root, where /usr/bin/cordon and man cordon-serve exist)"
in_root systemd-analyze verify /usr/lib/systemd/system/cordon.service >"$work/verify.log" 2>&1 ||
  { cat "$work/verify.log" >&2; fail "systemd-analyze verify refused cordon.service"; }
[ ! -s "$work/verify.log" ] || { cat "$work/verify.log" >&2; fail "systemd-analyze verify warned about cordon.service"; }

echo "== upgrade: the same package again, then $version+pkgtest"
in_root runuser -u cordon -- sh -c 'echo kept >/var/lib/cordon/marker'
echo 'CORDON_SERVE_FLAGS="--listen=127.0.0.1:9090"' >>"$root/etc/default/cordon"
conf=$(md5sum <"$root/etc/default/cordon")
key=$(cat "$root/var/lib/cordon/initial-api-key")
kept() {
  [ "$(cat "$root/var/lib/cordon/marker" 2>/dev/null)" = kept ] || fail "$1: /var/lib/cordon/marker is gone"
  [ "$(md5sum <"$root/etc/default/cordon")" = "$conf" ] || fail "$1: the changed /etc/default/cordon was not kept"
  [ "$(cat "$root/var/lib/cordon/initial-api-key")" = "$key" ] || fail "$1: the initial API key changed"
  [ "$(in_root runuser -u cordon -- env CORDON_DATA_DIR=/var/lib/cordon cordon keys list | grep -cE '\bactive([[:space:]]+admin)?$')" = 1 ] ||
    fail "$1: not exactly one active key"
}
in_root dpkg -i /tmp/cordon.deb >"$work/reinstall.log" 2>&1 || { cat "$work/reinstall.log" >&2; fail "reinstalling failed"; }
kept "reinstall"
d=$(mktemp -d "$work/x.XXXXXX")
dpkg-deb -x "$deb" "$d"
bumped=$(scripts/package-deb.sh --cordon "$d/usr/bin/cordon" --out "$work/bumped" --version-suffix +pkgtest --compress gzip)
rm -rf "$d"
cp "$bumped" "$root/tmp/cordon-bumped.deb"
in_root dpkg -i /tmp/cordon-bumped.deb >"$work/upgrade.log" 2>&1 || { cat "$work/upgrade.log" >&2; fail "upgrading failed"; }
[ "$(installed_version)" = "$version+pkgtest" ] || fail "the upgrade did not install $version+pkgtest"
kept "upgrade to $version+pkgtest"
rm -f "$root/tmp/cordon.deb" "$root/tmp/cordon-bumped.deb"

echo "== remove keeps data, conffile and user; purge leaves nothing"
in_root dpkg -r cordon >"$work/remove.log" 2>&1 || { cat "$work/remove.log" >&2; fail "dpkg -r failed"; }
[ ! -e "$root/usr/bin/cordon" ] || fail "dpkg -r left /usr/bin/cordon"
[ -e "$root/var/lib/cordon/marker" ] || fail "dpkg -r removed /var/lib/cordon's data"
[ -e "$root/etc/default/cordon" ] || fail "dpkg -r removed the conffile /etc/default/cordon"
in_root getent passwd cordon >/dev/null || fail "dpkg -r removed the user"
in_root dpkg --purge cordon >"$work/purge.log" 2>&1 || { cat "$work/purge.log" >&2; fail "dpkg --purge failed"; }
snapshot "$work/after"
if ! diff "$work/before" "$work/after" >"$work/diff"; then
  cat "$work/diff" >&2
  fail "the root after install, upgrade and purge differs from before (above: < before, > after)"
fi

# The service as systemd runs it, with the unit's hardening: a sandbox made through the API,
# a command in it (user, mount, pid, uts namespaces, a new /proc, sethostname), a file copied in
# and out (openat2), no key in the journal, nothing of the user cordon left after a stop.
# The container has its own network namespace (loopback only).
if command -v systemd-nspawn >/dev/null; then
  echo "== the installed package booted with systemd-nspawn: cordon.service makes sandboxes"
  cp "$deb" "$root/tmp/cordon.deb"
  in_root dpkg -i /tmp/cordon.deb >"$work/install2.log" 2>&1 || { cat "$work/install2.log" >&2; fail "installing again after the purge failed"; }
  rm -f "$root/tmp/cordon.deb"
  machine=cordon-pkgtest-$$
  # No machined or systemd on this host need be running: --register=no --keep-unit.
  systemd-nspawn -q -D "$root" -M "$machine" --register=no --keep-unit --private-network \
    -b --console=passive >"$work/boot.log" 2>&1 &
  nspawn=$!
  stop_boot() { kill "$nspawn" 2>/dev/null || true; wait "$nspawn" 2>/dev/null || true; rm -rf "/run/systemd/nspawn/propagate/$machine"; }
  trap 'stop_boot; rm -rf "$work"' EXIT
  leader=""
  for _ in $(seq 1 120); do
    leader=$(pgrep -P "$nspawn" -x systemd || true)
    if [ -n "$leader" ] && nsenter -t "$leader" -a systemctl is-system-running 2>/dev/null | grep -qE '^(running|degraded)$'; then break; fi
    sleep 0.5
  done
  [ -n "$leader" ] || { cat "$work/boot.log" >&2; fail "the root did not boot under systemd-nspawn within 60 s"; }
  in_ct() { nsenter -t "$leader" -a env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin "$@"; }
  for _ in $(seq 1 40); do
    in_ct bash -c 'exec 3<>/dev/tcp/127.0.0.1/8080' 2>/dev/null && break
    sleep 0.5
  done
  in_ct systemctl is-active -q cordon.service ||
    { in_ct systemctl status --no-pager cordon.service >&2 || true; fail "cordon.service is not running after boot"; }
  key=$(cat "$root/var/lib/cordon/initial-api-key")
  client() { in_ct env CORDON_API_KEY="$key" /usr/bin/cordon "$@"; }
  sbx=$(client sandbox create 2>&1) || fail "cordon.service could not make a sandbox: $sbx"
  out=$(client exec "$sbx" -- sh -c 'echo made; hostname; grep NoNewPrivs /proc/self/status' 2>&1) ||
    fail "a command in the service's sandbox failed: $out"
  grep -q '^made$' <<<"$out" || fail "a command in the service's sandbox printed: $out"
  echo 'through the file API' >"$root/root/probe"
  out=$(client cp /root/probe "$sbx:/tmp/probe" 2>&1) || fail "cordon cp into a sandbox of cordon.service failed: $out"
  rm -f "$root/root/probe"
  out=$(client cp "$sbx:/tmp/probe" - 2>&1) || fail "cordon cp through cordon.service failed: $out"
  [ "$out" = 'through the file API' ] || fail "cordon cp through cordon.service gave: $out"
  if in_ct journalctl -u cordon.service -o cat --no-pager | grep -qF "$key"; then fail "the API key is in the journal"; fi
  in_ct systemctl stop cordon.service
  left=$(in_ct find /proc -mindepth 1 -maxdepth 1 -regex '/proc/[0-9]+' -user cordon 2>/dev/null || true)
  [ -z "$left" ] || fail "processes of the user cordon outlived the service: $left"
  stop_boot
  trap 'rm -rf "$work"' EXIT
else
  echo "== systemd-nspawn is missing (apt-get install systemd-container): cordon.service not started"
fi
echo "package-test.sh: $(basename "$deb"): install, files, user, verify, upgrade, remove, purge and the running service all hold"
