//! `output.postgres.url`: a PostgreSQL connection URL (or libpq's
//! `key=value` text) read into the client's configuration, and what of it
//! may be shown (the server and the database, never the password). Apart
//! from the sink because the configuration's check refuses a URL written
//! in the file with a password in it, and `plan`/`status` show the server.
//!
//! `sslmode`: `disable`, `prefer` (the default: TLS when the server offers
//! it), `require` (TLS, the certificate unverified, as libpq's), and
//! `verify-ca`/`verify-full` (TLS, the certificate verified against the
//! system's roots, and the host name with `verify-full`), which the client
//! does not read itself: they are read here, and it is told `require`.
//! `sslrootcert=PATH` (a PEM file of the certificate authorities to trust,
//! a private CA's) replaces the system's roots, read here too.

/// How the connection is encrypted, as `sslmode` says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PgTls {
    Disable,
    Prefer,
    Require,
    /// TLS with the certificate checked against the system's roots (and,
    /// `host`, its name against the host's).
    Verify {
        host: bool,
    },
}

/// A parsed connection URL.
#[derive(Clone)]
pub struct PgUrl {
    pub config: postgres::Config,
    pub tls: PgTls,
    /// `sslrootcert`: the authorities to trust instead of the system's.
    pub root_cert: Option<std::path::PathBuf>,
}

impl std::fmt::Debug for PgUrl {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "PgUrl({})", self.server())
    }
}

/// Read `text` (a URL or `key=value` text). The error never holds the
/// text (it may hold a password).
pub fn parse_url(text: &str) -> Result<PgUrl, String> {
    let mut verify = None;
    let (mut rewritten, root_cert) = take_param(text, "sslrootcert");
    for (mode, host) in [("verify-full", true), ("verify-ca", false)] {
        let word = format!("sslmode={mode}");
        if rewritten.contains(&word) {
            verify = Some(host);
            rewritten = rewritten.replace(&word, "sslmode=require");
        }
    }
    let config: postgres::Config = rewritten.parse().map_err(|e: postgres::Error| {
        format!(
            "not a PostgreSQL connection URL (postgres://USER@HOST:PORT/DATABASE?sslmode=…): {e}"
        )
    })?;
    if config.get_hosts().is_empty() {
        return Err("names no host (postgres://USER@HOST:PORT/DATABASE)".into());
    }
    let tls = match (verify, config.get_ssl_mode()) {
        (Some(host), _) => PgTls::Verify { host },
        (None, postgres::config::SslMode::Disable) => PgTls::Disable,
        (None, postgres::config::SslMode::Require) => PgTls::Require,
        (None, _) => PgTls::Prefer,
    };
    Ok(PgUrl {
        config,
        tls,
        root_cert: root_cert.map(Into::into),
    })
}

/// `text` without its parameter `name` (`?name=V`/`&name=V` of a URL,
/// `name=V` of `key=value` text), and the parameter's value.
fn take_param(text: &str, name: &str) -> (String, Option<String>) {
    let word = format!("{name}=");
    let Some(at) = text
        .find(&word)
        .filter(|&i| i == 0 || matches!(text.as_bytes()[i - 1], b'?' | b'&' | b' ' | b'\t'))
    else {
        return (text.to_string(), None);
    };
    let start = at + word.len();
    let end = (text[start..].find(['&', ' ', '\t'])).map_or(text.len(), |e| start + e);
    let value = text[start..end].to_string();
    // (the separator after it goes with it; else the one before it, unless
    // that is the `?` that a next parameter would need)
    let (from, to) = match text[end..].chars().next() {
        Some(_) => (at, end + 1),
        None if at > 0 => (at - 1, end),
        None => (at, end),
    };
    let mut rest = format!("{}{}", &text[..from], &text[to..]);
    if rest.ends_with('?') {
        rest.pop();
    }
    (rest, Some(value))
}

impl PgUrl {
    /// Whether the text held a password.
    pub fn has_password(&self) -> bool {
        self.config.get_password().is_some_and(|p| !p.is_empty())
    }

    /// The server as messages name it: `HOST:PORT` (each, when several),
    /// and the database, never the user's password.
    pub fn server(&self) -> String {
        let ports = self.config.get_ports();
        let hosts: Vec<String> = (self.config.get_hosts().iter().enumerate())
            .map(|(i, h)| {
                let port = ports.get(i).or(ports.first()).copied().unwrap_or(5432);
                match h {
                    postgres::config::Host::Tcp(name) => format!("{name}:{port}"),
                    postgres::config::Host::Unix(dir) => format!("{}:{port}", dir.display()),
                }
            })
            .collect();
        let db = (self.config.get_dbname())
            .or(self.config.get_user())
            .unwrap_or("postgres");
        format!("{} database {db}", hosts.join(","))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_server_is_shown_without_the_password() {
        let u = parse_url("postgres://me:hunter2hunter2@db.example:6543/results").unwrap();
        assert!(u.has_password());
        assert_eq!(u.server(), "db.example:6543 database results");
        assert_eq!(u.tls, PgTls::Prefer);
        let u = parse_url("postgresql://me@db/r?sslmode=verify-full").unwrap();
        assert!(!u.has_password());
        assert_eq!(u.tls, PgTls::Verify { host: true });
        assert_eq!(u.server(), "db:5432 database r");
        let u = parse_url("host=db port=7 dbname=r sslmode=require password=x").unwrap();
        assert_eq!((u.tls, u.has_password()), (PgTls::Require, true));
        let u = parse_url("postgres://db/r?sslrootcert=/etc/ca.pem&sslmode=verify-full").unwrap();
        assert_eq!(u.tls, PgTls::Verify { host: true });
        assert_eq!(
            u.root_cert.as_deref(),
            Some(std::path::Path::new("/etc/ca.pem"))
        );
        let u = parse_url("postgres://db/r?sslmode=verify-ca&sslrootcert=ca.pem").unwrap();
        assert_eq!(
            (u.tls, u.root_cert.is_some()),
            (PgTls::Verify { host: false }, true)
        );
        let u = parse_url("host=db sslrootcert=ca.pem dbname=r").unwrap();
        assert_eq!(
            (u.root_cert.is_some(), u.config.get_dbname()),
            (true, Some("r"))
        );
        let e = parse_url("postgres://me:hunter2hunter2@db:notaport/r").unwrap_err();
        assert!(!e.contains("hunter2"), "{e}");
    }
}
