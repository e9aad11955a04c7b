//! Two small readings of the wire that pagination and redirects share:
//! whether a URL stays on its origin, and a header's bytes as text. They
//! live here, under both, so neither reader imports the other.

/// Whether `to` has the scheme, host and port of `from` (an https → http
/// redirect never has: the schemes differ).
pub fn same_origin(from: &reqwest::Url, to: &reqwest::Url) -> bool {
    from.scheme() == to.scheme()
        && from.host() == to.host()
        && from.port_or_known_default() == to.port_or_known_default()
}

/// A `Link` field's bytes as text: bytes past ASCII (raw UTF-8 in a
/// URL, which HTTP allows only as opaque data) percent-encoded, as
/// browsers do with a URL's.
pub fn visible(bytes: &[u8]) -> String {
    let mut out = String::with_capacity(bytes.len());
    for &b in bytes {
        if b.is_ascii() {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}
