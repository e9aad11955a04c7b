#!/usr/bin/env bash
# The package end to end, as root on a throwaway machine (.ci/run calls it):
# build it, lintian, install it, check what it installed, remove it and check
# what stays, purge it and check the config is gone. Then `cargo install`
# installs quota alone, and promtool accepts contrib/'s rules (the Rust test
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
  || DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$disk_quota_pkg" >/dev/null \
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
quota --version
man -w quota | grep -qx /usr/share/man/man1/quota.1.gz || fail "man -w quota: $(man -w quota)"
for f in /usr/share/bash-completion/completions/quota /usr/share/zsh/vendor-completions/_quota \
  /usr/share/fish/vendor_completions.d/quota.fish; do
  grep -q quota "$f" || fail "$f is missing or empty"
done
getent passwd quota >/dev/null || fail "postinst made no quota user"
[ "$(stat -c %U:%a /var/lib/quota)" = quota:750 ] || fail "/var/lib/quota: $(stat -c %U:%a /var/lib/quota)"
# (its key is a systemd credential: a stand-in for check)
mkdir "$tmp/creds" && echo not-a-key >"$tmp/creds/yt"
CREDENTIALS_DIRECTORY=$tmp/creds quota -c /etc/quota/quota.yaml check >/dev/null \
  || fail "the example /etc/quota/quota.yaml does not check"
# (outside the unit, as its header says: the rest checked, the key named)
env -u CREDENTIALS_DIRECTORY quota -c /etc/quota/quota.yaml check 2>"$tmp/unseen" >/dev/null \
  || fail "the example does not check outside the unit"
grep -q 'systemd credential yt' "$tmp/unseen" || fail "check outside the unit names no unseen key"

# The installed units: verify (an instance of each template) and the
# hardening of the repository's units (an exposure of 1.1: --threshold counts
# tenths).
units=/usr/lib/systemd/system
cp "$units/quota@.service" "$tmp/quota@check.service"
cp "$units/quota@.timer" "$tmp/quota@check.timer"
verify=$(cd "$tmp" && systemd-analyze verify --man=no ./quota@check.service ./quota@check.timer 2>&1) \
  || fail "systemd-analyze verify: $verify"
# (a bad directive is a warning, exit 0)
! grep -q quota@check <<<"$verify" || fail "systemd-analyze verify: $verify"
(cd "$tmp" && systemd-analyze security --offline=true --threshold=11 --no-pager ./quota@check.service) \
  | grep 'Overall exposure level' || fail "the installed unit is exposed above 1.1"

# sysusers.d and tmpfiles.d accepted, against a root of their own.
root=$tmp/root
mkdir -p "$root/etc"
systemd-sysusers --root="$root" /usr/lib/sysusers.d/quota.conf
grep -q '^quota:' "$root/etc/passwd" || fail "systemd-sysusers made no quota user"
systemd-tmpfiles --create --root="$root" /usr/lib/tmpfiles.d/quota.conf
[ "$(stat -c %a "$root/var/lib/quota")" = 750 ] || fail "systemd-tmpfiles made no /var/lib/quota"

# Remove: the operator's data and edits stay; the program and units go.
marker=ledger-check-$$.sqlite3
touch "/var/lib/quota/$marker"
echo '# edited' >>/etc/quota/quota.yaml
dpkg -r quota
[ ! -e /usr/bin/quota ] && [ ! -e "$units/quota@.service" ] || fail "dpkg -r left the program or a unit"
[ -f "/var/lib/quota/$marker" ] || fail "dpkg -r removed the state folder"
grep -q '^# edited' /etc/quota/quota.yaml || fail "dpkg -r removed the edited conffile"
# Purge: the config goes; the ledger and pages stay (the operator's data).
dpkg -P quota
[ ! -e /etc/quota/quota.yaml ] || fail "dpkg -P left /etc/quota/quota.yaml"
[ -f "/var/lib/quota/$marker" ] || fail "dpkg -P removed the state folder"
rm "/var/lib/quota/$marker"

# cargo install installs quota alone (the stand-in is a package of its own);
# the release build above is reused.
cargo install --quiet --locked --path . --root "$tmp/inst" --target-dir target
[ "$(ls "$tmp/inst/bin")" = quota ] || fail "cargo install installed: $(ls "$tmp/inst/bin")"

promtool check rules contrib/prometheus/quota.rules.yml
echo "packaging/check.sh: all checks passed ($deb)"
