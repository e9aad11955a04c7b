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
    let mut rewritten = text.to_string();
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
    Ok(PgUrl { config, tls })
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
        let e = parse_url("postgres://me:hunter2hunter2@db:notaport/r").unwrap_err();
        assert!(!e.contains("hunter2"), "{e}");
    }
}
