#!/usr/bin/env bash
# Install the system services the tests start privately: PostgreSQL (a shared index, initdb'd
# per test session), nginx (a TLS load balancer in front of server replicas), OpenSSH's
# sshd (SSH remotes: git-lfs-authenticate), and chromium (the admin page, in a real browser).
# None is enabled or started here; the tests run their own instances on loopback.
# As root on Debian/Ubuntu they are installed when missing; otherwise say what to install.
set -euo pipefail
missing=()
compgen -G "/usr/lib/postgresql/*/bin/initdb" >/dev/null || command -v initdb >/dev/null || missing+=(postgresql)
command -v nginx >/dev/null || [ -x /usr/sbin/nginx ] || missing+=(nginx)
command -v openssl >/dev/null || missing+=(openssl)
command -v chromium >/dev/null || missing+=(chromium)  # the admin page's browser test (Playwright drives it)
command -v sshd >/dev/null || [ -x /usr/sbin/sshd ] || missing+=(openssh-server)
((${#missing[@]})) || exit 0
if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
  echo "git-xet: installing system packages for the server tests: ${missing[*]}" >&2
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
  # Debian starts the packaged services; the tests need none of them running.
  for unit in postgresql nginx ssh; do
    command -v systemctl >/dev/null && systemctl disable --now "$unit" >/dev/null 2>&1 || true
  done
else
  echo "git-xet: the server tests need: ${missing[*]}" >&2
  echo "         (Debian/Ubuntu: sudo apt-get install ${missing[*]}), then rerun bash install/test.sh" >&2
  exit 1
fi
