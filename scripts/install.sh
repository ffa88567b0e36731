#!/usr/bin/env bash
# Installs what cordon needs on a Debian machine, builds cordon, installs it and runs one real
# sandboxed program.
#
#   ./scripts/install.sh           build the release binaries and install them
#   ./scripts/install.sh BINARY    install a cordon binary built elsewhere (no toolchain needed),
#                                  and the cordon-wasm beside it if there is one
#
# Two binaries: cordon, and cordon-wasm, the WebAssembly runtime (wasmtime + Cranelift, kept out
# of cordon's size and start-up), which cordon looks for beside itself, then on PATH.
#
# Where to: /usr/local/bin when run as root, else ~/.local/bin; CORDON_BIN_DIR=DIR overrides.
# The last lines printed say where cordon went and, if that directory is not on PATH, the line
# to add to the shell's profile.
set -euo pipefail
cd "$(dirname "$0")/.."

prebuilt=${1:-}
if [ -n "$prebuilt" ] && [ ! -x "$prebuilt" ]; then
  echo "install.sh: $prebuilt is not an executable file" >&2
  exit 1
fi

need_apt=()
command -v bwrap >/dev/null || need_apt+=(bubblewrap)       # only for `cordon bench`
[ -x /usr/bin/python3 ] || need_apt+=(python3)
command -v node >/dev/null || need_apt+=(nodejs)
[ -n "$prebuilt" ] || command -v gcc >/dev/null || need_apt+=(gcc libc6-dev)
if [ ${#need_apt[@]} -gt 0 ]; then
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  if [ -n "$SUDO" ] && ! command -v sudo >/dev/null; then
    echo "install.sh: not root and no sudo: install ${need_apt[*]} yourself (apt-get install ${need_apt[*]}); going on without" >&2
  else
    $SUDO apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${need_apt[@]}"
  fi
fi

if [ -n "$prebuilt" ]; then
  bin=$prebuilt
else
  if ! command -v cargo >/dev/null; then
    echo "cordon needs a Rust toolchain (1.85+): install it with rustup, then run this again." >&2
    exit 1
  fi
  bin=$(./scripts/build-release.sh)
fi

if [ -n "${CORDON_BIN_DIR:-}" ]; then
  dir=$CORDON_BIN_DIR
elif [ "$(id -u)" -eq 0 ]; then
  dir=/usr/local/bin
else
  dir=$HOME/.local/bin
fi
dest=$dir/cordon
install -d "$dir"
[ "$bin" -ef "$dest" ] || install -m 0755 "$bin" "$dest"
echo "== installed $dest"
wasm_bin=$(dirname "$bin")/cordon-wasm
if [ -x "$wasm_bin" ]; then
  [ "$wasm_bin" -ef "$dir/cordon-wasm" ] || install -m 0755 "$wasm_bin" "$dir/cordon-wasm"
  echo "== installed $dir/cordon-wasm (the WebAssembly backend)"
else
  echo "install.sh: no cordon-wasm beside $bin: WebAssembly modules will not run (cordon run -- X.wasm); build it with ./scripts/build-release.sh" >&2
fi

# Where AppArmor restricts unprivileged user namespaces (Ubuntu 23.10 and later), cordon needs
# its profile (packaging/apparmor/cordon), which lets cordon — and nothing else — create them.
# Only root can load it, and it must name a path only root can write.
restrict=/proc/sys/kernel/apparmor_restrict_unprivileged_userns
if [ "$(cat "$restrict" 2>/dev/null)" = 1 ]; then
  profile=$(<packaging/apparmor/cordon)
  if [ "$(id -u)" -eq 0 ] && command -v apparmor_parser >/dev/null; then
    case "$dest" in
      /usr/local/bin/cordon | /usr/bin/cordon) ;;
      *) profile=${profile//'/{usr/local/bin,usr/bin}/cordon'/\"$dest\"} ;;
    esac
    printf '%s\n' "$profile" >/etc/apparmor.d/cordon
    chmod 0644 /etc/apparmor.d/cordon
    apparmor_parser -r /etc/apparmor.d/cordon
    echo "== AppArmor: /etc/apparmor.d/cordon loaded (lets $dest create user namespaces)"
  else
    echo "AppArmor restricts unprivileged user namespaces here ($restrict = 1): cordon needs its profile." >&2
    echo "Install cordon as root (sudo ./scripts/install.sh), which loads it, or load it yourself:" >&2
    echo "  sudo install -m 0644 $PWD/packaging/apparmor/cordon /etc/apparmor.d/cordon && sudo apparmor_parser -r /etc/apparmor.d/cordon" >&2
    echo "(it applies to /usr/local/bin/cordon and /usr/bin/cordon; a path you can write, such as $dest, would hand user namespaces to anything put there)" >&2
  fi
fi

echo "== cordon check"
"$dest" check
echo "== a sandboxed run (default profile: no network, read-only system, 512M, 30s)"
"$dest" run -- python3 -c 'import os, socket; print("hello from", socket.gethostname(), "as uid", os.getuid(), "seeing", sorted(os.listdir("/")))'

# How to reach it. PATH entries are compared as written and by identity (a symlinked dir).
on_path=false
IFS=: read -ra path_dirs <<<"${PATH:-}"
for d in "${path_dirs[@]}"; do
  if [ -n "$d" ] && { [ "$d" = "$dir" ] || [ "$d" -ef "$dir" ]; }; then on_path=true; break; fi
done
echo
echo "cordon is installed at $dest"
if ! $on_path; then
  # Written with $HOME where it applies, so the profile line survives a renamed home.
  case "$dir" in
    "$HOME"/*) shown="\$HOME/${dir#"$HOME"/}" ;;
    *) shown=$dir ;;
  esac
  echo "$dir is not on your PATH, so a plain \`cordon\` is not found yet. Add it:"
  case "$(basename "${SHELL:-sh}")" in
    fish) echo "  fish_add_path $dir" ;;
    zsh) echo "  echo 'export PATH=\"$shown:\$PATH\"' >> ~/.zshrc" ;;
    bash) echo "  echo 'export PATH=\"$shown:\$PATH\"' >> ~/.bashrc" ;;
    *) echo "  echo 'export PATH=\"$shown:\$PATH\"' >> ~/.profile" ;;
  esac
  echo "and open a new terminal (or, for this one: export PATH=\"$dir:\$PATH\")."
  echo "Until then: $dest run -- python3 -c 'print(6 * 7)'"
else
  first=$(command -v cordon || true)
  if [ -n "$first" ] && ! [ "$first" -ef "$dest" ]; then
    echo "warning: $first comes first on your PATH and is not this cordon; remove it, or call $dest" >&2
  else
    echo "Try: cordon run -- python3 -c 'print(6 * 7)'"
  fi
fi
