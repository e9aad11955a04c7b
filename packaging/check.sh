#!/usr/bin/env bash
# The package end to end, as root on a throwaway machine (.ci/run calls it):
# build it, lintian, install it, check what it installed, remove it and check
# what stays, purge it and check the config is gone. Then `cargo install`
# installs portion alone, and promtool accepts contrib/'s rules (the Rust test
# contrib:: runs `promtool test rules` over real output).
#   bash packaging/check.sh [PACKAGE.deb]
set -euo pipefail
cd "$(dirname "$0")/.."
fail() { echo "packaging/check.sh: $*" >&2; exit 1; }
[ "$(id -u)" = 0 ] || fail "run as root (it installs the package)"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# (a package given as the argument is checked as it is, not built)
deb=${1:-$(bash packaging/deb.sh | tail -n 1)}
[ -f "$deb" ] || fail "no package built"
ours=$(dpkg-deb -f "$deb" Package)

# Debian's disk-quota tools (its package is named quota: /usr/bin/quota,
# quota.1) are installed first: ours installs beside them, and an everyday
# upgrade must not plan to replace ours with them (issue 37).
disk_quota_pkg=quota
dpkg -s "$disk_quota_pkg" >/dev/null 2>&1 \
  || { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$disk_quota_pkg" >/dev/null; } \
  || fail "could not install Debian's disk-quota tools (package $disk_quota_pkg)"
# No error and no warning; what is overridden says why (packaging/lintian-overrides).
lintian --fail-on error,warning --display-info "$deb"

dpkg -i "$deb"
[ "$(dpkg-query -W -f '${Status}' "$disk_quota_pkg")" = "install ok installed" ] \
  || fail "installing $ours removed Debian's disk-quota tools"
# (apt-get -s: a simulation; a line Inst/Remv/Conf of ours is a planned replacement)
apt-get -s dist-upgrade >"$tmp/upgrade" 2>&1 || fail "apt-get -s dist-upgrade: $(cat "$tmp/upgrade")"
! grep -E "^(Inst|Remv|Conf|Purg) $ours( |$)" "$tmp/upgrade" \
  || fail "apt-get -s dist-upgrade plans to replace $ours"
portion --version
man -w portion | grep -qx /usr/share/man/man1/portion.1.gz || fail "man -w portion: $(man -w portion)"
for f in /usr/share/bash-completion/completions/portion /usr/share/zsh/vendor-completions/_portion \
  /usr/share/fish/vendor_completions.d/portion.fish; do
  grep -q portion "$f" || fail "$f is missing or empty"
done
getent passwd portion >/dev/null || fail "postinst made no portion user"
[ "$(stat -c %U:%a /var/lib/portion)" = portion:750 ] || fail "/var/lib/portion: $(stat -c %U:%a /var/lib/portion)"
# (its key is a systemd credential: a stand-in for check)
mkdir "$tmp/creds" && echo not-a-key >"$tmp/creds/yt"
CREDENTIALS_DIRECTORY=$tmp/creds portion -c /etc/portion/portion.yaml check >/dev/null \
  || fail "the example /etc/portion/portion.yaml does not check"
# (outside the unit, as its header says: the rest checked, the key named)
env -u CREDENTIALS_DIRECTORY portion -c /etc/portion/portion.yaml check 2>"$tmp/unseen" >/dev/null \
  || fail "the example does not check outside the unit"
grep -q 'systemd credential yt' "$tmp/unseen" || fail "check outside the unit names no unseen key"

# The installed units: verify (an instance of each template) and the
# hardening of the repository's units (an exposure of 1.1: --threshold counts
# tenths).
units=/usr/lib/systemd/system
cp "$units/portion@.service" "$tmp/portion@check.service"
cp "$units/portion@.timer" "$tmp/portion@check.timer"
verify=$(cd "$tmp" && systemd-analyze verify --man=no ./portion@check.service ./portion@check.timer 2>&1) \
  || fail "systemd-analyze verify: $verify"
# (a bad directive is a warning, exit 0)
! grep -q portion@check <<<"$verify" || fail "systemd-analyze verify: $verify"
(cd "$tmp" && systemd-analyze security --offline=true --threshold=11 --no-pager ./portion@check.service) \
  | grep 'Overall exposure level' || fail "the installed unit is exposed above 1.1"

# sysusers.d and tmpfiles.d accepted, against a root of their own.
root=$tmp/root
mkdir -p "$root/etc"
systemd-sysusers --root="$root" /usr/lib/sysusers.d/portion.conf
grep -q '^portion:' "$root/etc/passwd" || fail "systemd-sysusers made no portion user"
systemd-tmpfiles --create --root="$root" /usr/lib/tmpfiles.d/portion.conf
[ "$(stat -c %a "$root/var/lib/portion")" = 750 ] || fail "systemd-tmpfiles made no /var/lib/portion"

# Remove: the operator's data and edits stay; the program and units go.
marker=ledger-check-$$.sqlite3
touch "/var/lib/portion/$marker"
echo '# edited' >>/etc/portion/portion.yaml
dpkg -r portion
[ ! -e /usr/bin/portion ] && [ ! -e "$units/portion@.service" ] || fail "dpkg -r left the program or a unit"
[ -f "/var/lib/portion/$marker" ] || fail "dpkg -r removed the state folder"
grep -q '^# edited' /etc/portion/portion.yaml || fail "dpkg -r removed the edited conffile"
# Purge: the config goes; the ledger and pages stay (the operator's data).
dpkg -P portion
[ ! -e /etc/portion/portion.yaml ] || fail "dpkg -P left /etc/portion/portion.yaml"
[ -f "/var/lib/portion/$marker" ] || fail "dpkg -P removed the state folder"
rm "/var/lib/portion/$marker"

# cargo install installs portion alone (the stand-in is a package of its own);
# the release build above is reused.
cargo install --quiet --locked --path . --root "$tmp/inst" --target-dir target
[ "$(ls "$tmp/inst/bin")" = portion ] || fail "cargo install installed: $(ls "$tmp/inst/bin")"

promtool check rules contrib/prometheus/portion.rules.yml
echo "packaging/check.sh: all checks passed ($deb)"
