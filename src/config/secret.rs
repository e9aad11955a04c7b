//! Secrets: where they come from (`{env: NAME}`, `{file: PATH}`,
//! `{credential: NAME}` under systemd's `$CREDENTIALS_DIRECTORY`) and the
//! redacting type that holds them once read.

use std::fmt;
use std::path::{Path, PathBuf};

/// A secret value. It has no `Display`, and its `Debug` prints `***`, so a
/// log line, an error or a panic message cannot show it by accident; the one
/// way to the value is [`Secret::expose`].
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(String);

impl Secret {
    pub fn new(value: String) -> Self {
        Self(value)
    }

    /// The value itself, for the one place that must send it upstream.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Secret(***)")
    }
}

/// Where a secret is read from, as the configuration names it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SecretSource {
    Env(String),
    File(PathBuf),
    /// A systemd credential: `$CREDENTIALS_DIRECTORY/NAME`.
    Credential(String),
}

impl fmt::Display for SecretSource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Env(name) => write!(f, "env {name}"),
            Self::File(path) => write!(f, "file {}", path.display()),
            Self::Credential(name) => write!(f, "systemd credential {name}"),
        }
    }
}

impl SecretSource {
    /// Read the secret. A missing or empty one is an error whose message says
    /// where it was looked for (never what was found).
    pub fn read(&self, base: &Path) -> Result<Secret, String> {
        let value = match self {
            Self::Env(name) => match std::env::var(name) {
                Ok(v) => v,
                Err(std::env::VarError::NotPresent) => {
                    return Err(format!("environment variable {name} is not set"));
                }
                Err(std::env::VarError::NotUnicode(_)) => {
                    return Err(format!("environment variable {name} is not valid UTF-8"));
                }
            },
            Self::File(path) => {
                let path = base.join(path);
                read_file(&path)?
            }
            Self::Credential(name) => {
                let dir = std::env::var_os("CREDENTIALS_DIRECTORY").ok_or_else(|| {
                    format!(
                        "systemd credential {name} asked for, but $CREDENTIALS_DIRECTORY is not set (use LoadCredential= in the unit)"
                    )
                })?;
                read_file(&Path::new(&dir).join(name))?
            }
        };
        // Files usually end with a newline that is not part of the key.
        let value = value.trim_end_matches(['\r', '\n']).to_string();
        if value.trim().is_empty() {
            return Err(format!("the secret from {self} is empty"));
        }
        Ok(Secret(value))
    }
}

fn read_file(path: &Path) -> Result<String, String> {
    std::fs::read_to_string(path).map_err(|e| format!("cannot read {}: {e}", path.display()))
}

/// Replace every occurrence of each secret (as is and URL-encoded) in `text`
/// with `***`. Used on anything that came back from the network or from an
/// HTTP library before it is logged or shown.
pub fn redact(text: &str, secrets: &[&Secret]) -> String {
    let mut out = text.to_string();
    for secret in secrets {
        let raw = secret.expose();
        if raw.is_empty() {
            continue;
        }
        out = out.replace(raw, "***");
        let encoded: String = url_encode(raw);
        if encoded != raw {
            out = out.replace(&encoded, "***");
        }
    }
    out
}

fn url_encode(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn debug_never_shows_the_value() {
        let s = Secret::new("AIzaTopSecret".into());
        assert_eq!(format!("{s:?}"), "Secret(***)");
        assert!(!format!("{:?}", Some(&s)).contains("TopSecret"));
    }

    #[test]
    fn redacts_plain_and_url_encoded_forms() {
        let s = Secret::new("k+y/1".into());
        let text = "url=https://x/?key=k%2By%2F1 raw=k+y/1";
        assert_eq!(redact(text, &[&s]), "url=https://x/?key=*** raw=***");
    }

    #[test]
    fn empty_and_missing_secrets_are_errors() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("empty"), "\n").unwrap();
        let err = SecretSource::File("empty".into())
            .read(dir.path())
            .unwrap_err();
        assert!(err.contains("empty"), "{err}");
        let err = SecretSource::File("absent".into())
            .read(dir.path())
            .unwrap_err();
        assert!(err.contains("cannot read"), "{err}");
        std::fs::write(dir.path().join("key"), "abc\n").unwrap();
        let s = SecretSource::File("key".into()).read(dir.path()).unwrap();
        assert_eq!(s.expose(), "abc");
    }
}
