#!/usr/bin/env bash
# Build target/debian/portion_VERSION_ARCH.deb: a release build of portion and
# the files of a Debian package, staged under target/debian/stage and packed
# with dpkg-deb. dpkg-deb over a staged tree rather than cargo-deb: Debian's
# own tools (dpkg-dev, binutils), nothing to compile first (cargo-deb is
# minutes of build on a fresh CI machine), and every path and mode in sight
# here. gzip, not xz: xz takes minutes on 2 busy cores for little gain.
# Needs dpkg-dev (dpkg-shlibdeps), binutils (strip) and gzip.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD

version=$(sed -n 's/^version = "\(.*\)"$/\1/p' Cargo.toml | head -n 1)
arch=$(dpkg --print-architecture)
out=target/debian
stage=$out/stage
deb=$out/portion_${version}_${arch}.deb

cargo build --release --locked -p portion --bin portion
rm -rf "$stage" && mkdir -p "$stage/DEBIAN"
bin=$stage/usr/bin/portion
install -D -m 0755 target/release/portion "$bin"
strip --strip-unneeded --remove-section=.comment --remove-section=.note "$bin"

# The repository's units, made the package's: the binary in /usr/bin, and
# the sysusers.d user with the tmpfiles.d folder in place of a DynamicUser
# (a DynamicUser's state lives in /var/lib/private; RemoveIPC= is what
# DynamicUser implied). The header's manual install steps give way to the
# package's.
unit() { # SOURCE DEST: SOURCE from its [Unit] line on, under a header
  install -d "$(dirname "$2")"
  { printf '# %s: installed by the Debian package portion; change it with a drop-in\n' "$(basename "$1")"
    printf '# (systemctl edit %s), not here.\n#\n' "$(basename "$1")"
    printf '#   systemctl enable --now portion@NAME.timer   # runs /etc/portion/NAME.yaml\n\n'
    sed -n '/^\[Unit\]$/,$p' "$1"
  } >"$2"
  chmod 0644 "$2"
}
units=$stage/usr/lib/systemd/system
unit systemd/portion@.timer "$units/portion@.timer"
unit systemd/portion@.service "$units/portion@.service"
sed -i -e 's|^ExecStart=/usr/local/bin/portion |ExecStart=/usr/bin/portion |' \
  -e 's|^DynamicUser=yes$|User=portion\nGroup=portion\nRemoveIPC=yes|' \
  -e 's|^StateDirectory=portion$|StateDirectory=portion\nStateDirectoryMode=0750|' \
  "$units/portion@.service"
for line in 'ExecStart=/usr/bin/portion --config /etc/portion/%i.yaml run' User=portion \
  StateDirectoryMode=0750; do
  grep -qxF "$line" "$units/portion@.service" || { echo "deb.sh: the unit lacks $line (systemd/portion@.service changed?)" >&2; exit 1; }
done
! grep -q -e DynamicUser= -e /usr/local "$units/portion@.service" \
  || { echo "deb.sh: DynamicUser or /usr/local left in the unit" >&2; exit 1; }

install -D -m 0644 packaging/sysusers.conf "$stage/usr/lib/sysusers.d/portion.conf"
install -D -m 0644 packaging/tmpfiles.conf "$stage/usr/lib/tmpfiles.d/portion.conf"
install -D -m 0644 packaging/portion.yaml "$stage/etc/portion/portion.yaml"
printf '/etc/portion/portion.yaml\n' >"$stage/DEBIAN/conffiles"
install -m 0755 packaging/postinst packaging/postrm "$stage/DEBIAN/"
install -D -m 0644 packaging/lintian-overrides "$stage/usr/share/lintian/overrides/portion"

# The man page and the completions, from the binary just built.
install -d "$stage/usr/share/man/man1"
"$bin" man | gzip -9n >"$stage/usr/share/man/man1/portion.1.gz"
install -d "$stage/usr/share/bash-completion/completions" \
  "$stage/usr/share/zsh/vendor-completions" "$stage/usr/share/fish/vendor_completions.d"
"$bin" completions bash >"$stage/usr/share/bash-completion/completions/portion"
"$bin" completions zsh >"$stage/usr/share/zsh/vendor-completions/_portion"
"$bin" completions fish >"$stage/usr/share/fish/vendor_completions.d/portion.fish"

doc=$stage/usr/share/doc/portion
install -D -m 0644 packaging/copyright "$doc/copyright"
# A native package's changelog: this version, dated by the last commit
# (the same bytes from the same tree).
when=$(git log -1 --format=%cD 2>/dev/null || date -R)
maintainer=${DEB_MAINTAINER:-portion maintainers <maintainers@users.noreply.a-seed-4fc2d30d.example>}
printf 'portion (%s) unstable; urgency=medium\n\n  * Built from the repository (see README.md).\n\n -- %s  %s\n' \
  "$version" "$maintainer" "$when" | gzip -9n >"$doc/changelog.gz"
find "$stage" -type d -exec chmod 0755 {} +
find "$stage/usr/share" "$stage/etc" -type f -exec chmod 0644 {} +

# Depends: the shared libraries the binary links (libc6, libgcc-s1), as
# dpkg-shlibdeps reads them, and systemd-sysusers for postinst.
shlibs=$(mktemp -d)
trap 'rm -rf "$shlibs"' EXIT
mkdir "$shlibs/debian" && printf 'Source: portion\n\nPackage: portion\nArchitecture: any\n' >"$shlibs/debian/control"
# (less its warning that the binary is not under debian/portion: it is not meant to be)
depends=$(cd "$shlibs" && dpkg-shlibdeps -O -e "$root/$bin" 2> >(grep -v 'should already be installed' >&2) \
  | sed -n 's/^shlibs:Depends=//p')
[ -n "$depends" ] || { echo "deb.sh: dpkg-shlibdeps found no dependencies" >&2; exit 1; }
size=$(du -sk --exclude=DEBIAN "$stage" | cut -f1)
cat >"$stage/DEBIAN/control" <<CONTROL
Package: portion
Version: $version
Architecture: $arch
Maintainer: $maintainer
Installed-Size: $size
Depends: $depends, systemd | systemd-standalone-sysusers | systemd-sysusers
Section: admin
Priority: optional
Description: spend a metered API's quota safely, from a timer
 portion runs jobs against metered HTTP APIs (YouTube, GitHub, LLM APIs, any
 API with a quota) and charges every call to a ledger before it is sent, so
 that no run, host or script spends more than the budgets its configuration
 gives each window. The ledger is embedded (SQLite) or shared (Redis).
 .
 The package installs the quota command, systemd units that run
 /etc/portion/NAME.yaml every 30 minutes as the quota system user
 (portion@NAME.timer), the man page and bash, zsh and fish completions.
CONTROL
(cd "$stage" && find . -path ./DEBIAN -prune -o -type f -printf '%P\0' | sort -z | xargs -0 md5sum) >"$stage/DEBIAN/md5sums"
chmod 0644 "$stage/DEBIAN/control" "$stage/DEBIAN/conffiles" "$stage/DEBIAN/md5sums"

SOURCE_DATE_EPOCH=$(git log -1 --format=%ct 2>/dev/null || date +%s) \
  dpkg-deb --root-owner-group -Zgzip -z9 --build "$stage" "$deb" >/dev/null
echo "$deb"
