//! What the command line picks out of the configuration by name: jobs
//! for `run`, a credential for `charge`, `exec`, `status` and `unblock`.
//! A name the file does not have is a usage error (2): the file is not
//! wrong, the name typed is.

use super::{Config, Credential, Job};
use crate::{Error, Result};

impl Config {
    /// The credential named `name` on the command line.
    pub fn credential_named(&self, name: &str) -> Result<&Credential> {
        self.credentials
            .iter()
            .find(|c| c.name == name)
            .ok_or_else(|| {
                let known: Vec<_> = self.credentials.iter().map(|c| c.name.as_str()).collect();
                Error::Usage(format!(
                    "no credential named '{name}' in {} (credentials: {})",
                    self.file.display(),
                    known.join(", ")
                ))
            })
    }

    /// The jobs `names` asks for (all, if empty), in the file's order.
    pub fn select_jobs(&self, names: &[String]) -> Result<Vec<&Job>> {
        for name in names {
            if !self.jobs.iter().any(|j| &j.name == name) {
                let known: Vec<_> = self.jobs.iter().map(|j| j.name.as_str()).collect();
                return Err(Error::Usage(format!(
                    "no job named '{name}' in {} (jobs: {})",
                    self.file.display(),
                    known.join(", ")
                )));
            }
        }
        Ok(self
            .jobs
            .iter()
            .filter(|j| names.is_empty() || names.contains(&j.name))
            .collect())
    }
}
