//! Secrets: where they come from (`{env: NAME}`, `{file: PATH}`,
//! `{credential: NAME}` under systemd's `$CREDENTIALS_DIRECTORY`) and the
//! redacting type that holds them once read. Masking a secret in a text, in
//! every encoding, is [`mask()`] (in `secret/mask.rs`).

mod mask;

use std::fmt;
use std::path::{Path, PathBuf};

pub use self::mask::{Masker, mask, redact};

/// The fewest bytes a secret may have (see [`SecretSource::read`]).
pub const MIN_SECRET_LEN: usize = 8;

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
    /// A systemd credential read outside its unit: systemd sets
    /// `$CREDENTIALS_DIRECTORY` for the unit's process only, so a command
    /// run from a shell (`check`) cannot see it, and that is no error of
    /// the configuration.
    pub fn outside_its_unit(&self) -> bool {
        matches!(self, Self::Credential(_)) && std::env::var_os("CREDENTIALS_DIRECTORY").is_none()
    }

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
        // Files usually end with a newline that is not part of the key, and
        // some editors (Windows') begin one with a byte order mark that is
        // not part of it either.
        let value = value.trim_end_matches(['\r', '\n']);
        let value = value.strip_prefix('\u{feff}').unwrap_or(value).to_string();
        if value.trim().is_empty() {
            return Err(format!("the secret from {self} is empty"));
        }
        // A control character (a newline inside, a tab, an escape) is never
        // part of a key: it would be dropped from a URL or refused in a
        // header after the call was charged, and it defeats redaction.
        if value.chars().any(char::is_control) {
            return Err(format!(
                "the secret from {self} contains a control character (a line break inside it, a tab, …); an API key has none: only a final line break is dropped"
            ));
        }
        // Pages are masked for every occurrence of the secret: a short one
        // (`7`) would be masked inside unrelated text and corrupt the JSON.
        if value.len() < MIN_SECRET_LEN {
            return Err(format!(
                "the secret from {self} is shorter than {MIN_SECRET_LEN} bytes: a secret that short would be masked inside unrelated text of the pages (no API key is that short)"
            ));
        }
        Ok(Secret(value))
    }
}

fn read_file(path: &Path) -> Result<String, String> {
    std::fs::read_to_string(path).map_err(|e| format!("cannot read {}: {e}", path.display()))
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
    fn control_characters_are_refused_at_load() {
        let dir = tempfile::tempdir().unwrap();
        for bad in ["abc\ndef\n", "abc\tdef", "abc\x1b[0m", "abc\r\ndef"] {
            std::fs::write(dir.path().join("key"), bad).unwrap();
            let err = SecretSource::File("key".into())
                .read(dir.path())
                .unwrap_err();
            assert!(
                err.contains("file key contains a control character"),
                "{err}"
            );
            assert!(!err.contains("abc"), "{err}");
        }
        std::fs::write(dir.path().join("key"), "abcd efgh\r\n").unwrap();
        let s = SecretSource::File("key".into()).read(dir.path()).unwrap();
        assert_eq!(s.expose(), "abcd efgh");
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
        std::fs::write(dir.path().join("key"), "abcdefgh\n").unwrap();
        let s = SecretSource::File("key".into()).read(dir.path()).unwrap();
        assert_eq!(s.expose(), "abcdefgh");
    }

    #[test]
    fn a_short_secret_is_refused_and_a_byte_order_mark_dropped() {
        let dir = tempfile::tempdir().unwrap();
        let read = |text: &str| {
            std::fs::write(dir.path().join("key"), text).unwrap();
            SecretSource::File("key".into()).read(dir.path())
        };
        let err = read("Zq7wXy9\n").unwrap_err();
        assert!(err.contains("file key is shorter than 8 bytes"), "{err}");
        assert!(!err.contains("Zq7wXy9"), "{err}");
        // The mark does not count towards the 8 bytes either.
        assert!(read("\u{feff}Zq7wXy9\n").is_err());
        assert_eq!(read("\u{feff}Zq7wXy9v\n").unwrap().expose(), "Zq7wXy9v");
    }
}
