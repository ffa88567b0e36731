#!/usr/bin/env bash
# Runs cordon against a real cgroup v2 hierarchy in a throw-away VM, for hosts (like the one
# cordon is developed on) whose memory, pids and cpu controllers are held by cgroup v1.
#
#   ./scripts/cgroup2-vm.sh [CORDON_BINARY [ENGINE_TEST_BINARY]]
#
# Boots Debian's cloud kernel under qemu (software emulation: no KVM needed, ~1.5 s to boot)
# with an initramfs holding busybox, cordon and the libraries it links, mounts cgroup2 alone at
# /sys/fs/cgroup, and checks what cordon reports: `cordon check`, a plain run, an OOM, a pids
# limit, a CPU quota, a run without namespaces (user.max_user_namespaces=0) and its OOM, and
# that no cgroup is left. With an engine test binary
# (target/debug/deps/cordon_linux-*), its cgroup unit tests run there too. Needs root for apt
# (qemu-system-x86); the kernel, busybox and cpio are downloaded with apt-get download and only
# unpacked, never installed. Exit status 0 when every check holds.
set -euo pipefail
cd "$(dirname "$0")/.."
bin=$(realpath "${1:-target/debug/cordon}")
engine=${2:+$(realpath "$2")}
[ -x "$bin" ] || { echo "cgroup2-vm.sh: $bin is not executable (cargo build first)" >&2; exit 1; }

if ! command -v qemu-system-x86_64 >/dev/null; then
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends qemu-system-x86 >/dev/null
fi
work=$(mktemp -d /tmp/cordon-cgroup2-vm.XXXXXX)
trap 'rm -rf "$work"' EXIT
cd "$work"
kernel_pkg=$(apt-cache depends linux-image-cloud-amd64 | awk '/Depends: linux-image-[0-9]/ {print $2; exit}')
apt-get download -q "$kernel_pkg" busybox-static cpio >/dev/null 2>&1
for d in *.deb; do dpkg-deb -x "$d" x; done
vmlinuz=$(ls x/boot/vmlinuz-*)

mkdir -p r/{bin,usr/bin,lib/x86_64-linux-gnu,lib64,etc,root}
cp x/bin/busybox r/bin/
strip -o r/usr/bin/cordon "$bin"
libs=$(ldd "$bin" | awk '/=>/ {print $3} /ld-linux/ {print $1}')
if [ -n "$engine" ]; then
  strip -o r/usr/bin/engine-tests "$engine"
  libs="$libs $(ldd "$engine" | awk '/=>/ {print $3} /ld-linux/ {print $1}')"
fi
for l in $libs; do mkdir -p "r$(dirname "$l")"; cp -L "$l" "r$l"; done
echo "root:x:0:0:root:/root:/bin/sh" >r/etc/passwd
echo vm >r/etc/hostname
# Stage 1: the initramfs root cannot be pivot_root'ed away from (cordon's mount namespace
# does that), so everything moves to a tmpfs first.
cat >r/init <<'EOF'
#!/bin/busybox sh
/bin/busybox mkdir -p /newroot
/bin/busybox mount -t tmpfs -o size=600m root /newroot
/bin/busybox cp -a /bin /usr /lib /lib64 /etc /root /stage2 /newroot/
/bin/busybox mkdir -p /newroot/proc /newroot/sys /newroot/dev /newroot/tmp
exec /bin/busybox switch_root /newroot /stage2
EOF
cat >r/stage2 <<'EOF'
#!/bin/busybox sh
/bin/busybox --install -s /bin
mount -t proc proc /proc; mount -t sysfs sys /sys; mount -t devtmpfs dev /dev
mount -t tmpfs -o mode=1777 tmp /tmp
mkdir -p /sys/fs/cgroup && mount -t cgroup2 none /sys/fs/cgroup
echo "== kernel $(uname -r); cgroup2 controllers: $(cat /sys/fs/cgroup/cgroup.controllers)"
cordon check
echo "== plain"; cordon run --json -- /bin/sh -c 'echo hi'; echo
echo "== oom"; cordon run --json --memory 32M -- /bin/sh -c 'x=$(head -c 100000000 /dev/zero | tr "\0" a); echo ${#x}'; echo
echo "== pids"; cordon run --json --pids 8 -- /bin/sh -c 'for i in 1 2 3 4 5 6 7 8 9 10 11 12; do sleep 1 & done; wait'; echo
echo "== cpu"; cordon run --json --cpus 0.25 --timeout 8s -- /bin/sh -c 'while :; do :; done'; echo
# A host that refuses user namespaces (the sysctl at 0, as on a hardened kernel): cordon runs
# without namespaces, in a v2 cgroup, with this kernel's Landlock (ABI 2: no TCP rules).
echo 0 >/proc/sys/user/max_user_namespaces; chmod 777 /root  # only Landlock may refuse the write
echo "== degraded"; cordon run --json -- /bin/sh -c 'echo x >/root/planted; ls /root; echo ok'; echo
echo "== degraded oom"; cordon run --json --memory 32M -- /bin/sh -c 'x=$(head -c 100000000 /dev/zero | tr "\0" a); echo ${#x}'; echo
echo "== planted: $(ls /root/planted 2>/dev/null || echo none)"
echo "== left: $(find /sys/fs/cgroup -mindepth 1 -type d | wc -l) cgroups"
if [ -x /usr/bin/engine-tests ]; then cd /tmp && engine-tests --test-threads=1 cgroup:: 2>&1 | grep 'test result'; fi
echo "== end"
poweroff -f
EOF
chmod +x r/init r/stage2
(cd r && find . | "$work/x/bin/cpio" -o -H newc 2>/dev/null | gzip -1) >initrd.gz
# The console goes to a file, not to our stdio: with -nographic, qemu takes over the
# caller's stdin and stdout (a caller writing to a file lost everything printed after it).
timeout 600 qemu-system-x86_64 -machine q35,accel=tcg -m 1024 -smp 2 -display none -monitor none \
  -serial file:vm.log -no-reboot -kernel "$vmlinuz" -initrd initrd.gz \
  -append "console=ttyS0 panic=-1 quiet" </dev/null >qemu.log 2>&1 || true
log=$(tr -d '\r' <vm.log)
echo "$log" | sed -n '/^== kernel/,/^== end/p'

fail=0
section() { echo "$log" | sed -n "/^== $1\$/,/^== /p"; }
need() { grep -qF -- "$2" <<<"$1" || { echo "cgroup2-vm: expected $3: $2" >&2; fail=1; }; }
need "$log" "cgroup v2 usable (memory, pids, cpu)" "cordon check to find v2"
need "$(section plain)" '"cgroup":"v2"' "a plain run in a v2 cgroup"
need "$(section plain)" '"status":"exited"' "a plain run to exit"
need "$(section oom)" '"status":"oom"' "the OOM run to end as oom"
need "$(section oom)" '"limits_hit":["memory"]' "the OOM run to name the memory limit"
need "$(section pids)" '"pids"' "the pids run to name the pids limit"
cpu=$(section cpu | grep -o '"cpu_user_ms":[0-9]*' | cut -d: -f2)
# 8 s at a quarter of a CPU: about 2 s of CPU; without the quota it would be about 8 s.
if [ -z "$cpu" ] || [ "$cpu" -gt 3500 ] || [ "$cpu" -lt 1000 ]; then
  echo "cgroup2-vm: the CPU quota did not hold: ${cpu:-no} ms of CPU in 8 s at --cpus 0.25" >&2; fail=1
fi
need "$(section degraded)" '"user_ns":false' "a run without namespaces where the sysctl refuses them"
need "$(section degraded)" '"cgroup":"v2"' "a run without namespaces in a v2 cgroup"
need "$(section degraded)" 'Permission denied' "Landlock to refuse a write outside the grants"
need "$(section 'degraded oom')" '"status":"oom"' "an OOM without namespaces to end as oom"
need "$log" "== planted: none" "nothing written outside the grants"
need "$log" "== left: 0 cgroups" "every cgroup removed"
[ -z "$engine" ] || need "$log" "test result: ok" "the engine's cgroup tests to pass"
exit $fail
