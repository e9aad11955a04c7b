//! The configuration: the YAML of the README parsed and validated into typed,
//! checked values. Everything the runner needs is resolved here (costs per
//! pool, budgets, templates, secrets), so a bad file fails before anything is
//! charged or sent, with the file and the field named.
//!
//! Loading is two passes over the text: first into a generic YAML value,
//! which catches syntax errors and duplicate keys anywhere (with line and
//! column), then into the raw structs of [`raw`] (`deny_unknown_fields` at
//! every level), whose errors carry the path of the field. Between the two,
//! merge keys are applied and top-level `x-` blocks dropped. The semantic
//! checks of [`validate`] turn those into the typed values below.

mod bounds;
mod columns;
mod concurrency;
mod inputs;
mod json_text;
mod learned;
mod output;
pub(crate) mod per_run;
pub mod postgres_url;
mod raw;
mod reset;
mod secret;
mod select;
mod step;
mod template;
mod upstream_headers;
mod validate;

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Deserialize;
use serde_yaml::Value;

use self::raw::RawConfig;
use self::validate::Validator;

pub use self::bounds::{MAX_UNITS, MAX_WINDOW, units_too_large};
pub use self::columns::{Column, ColumnKind, MAX_COLUMN_NAME, RESERVED_COLUMNS};
pub use self::inputs::{InputFormat, Inputs, MAX_BATCH, csv_builder, csv_header};
pub use self::json_text::{JsonText, compact, index as json_index, key_text, raw_at};
pub use self::learned::{Headroom, LearnedWindow};
pub use self::output::{PostgresOutput, SqliteOutput, pointer_parts};
pub use self::reset::UpstreamReset;
pub use self::secret::{Masker, Secret, SecretSource, mask, redact};
pub use self::step::{
    ActualFrom, ConditionalRequests, ForEach, Incremental, PageKind, Paginate, SettledCost, Step,
};
pub use self::template::{Fill, InputFields, JsonTemplate, Placeholder, Template};
pub use self::upstream_headers::CountHeaders;
use crate::ledger::{Pool, Shares, StoreLocation};
use crate::{Error, Result};

/// The file used when neither `-c` nor `$PORTION_CONFIG` names one.
pub const DEFAULT_FILE: &str = "portion.yaml";

/// A whole deployment, validated.
#[derive(Debug)]
pub struct Config {
    /// The file it was read from, for error messages.
    pub file: PathBuf,
    /// The store the file names, if it names one.
    pub store: Option<StoreLocation>,
    pub http: HttpSettings,
    /// How long a job's run lock lives unless renewed.
    pub lock_ttl: Duration,
    pub credentials: Vec<Credential>,
    pub jobs: Vec<Job>,
}

/// How upstream requests are made and retried.
#[derive(Clone, Debug)]
pub struct HttpSettings {
    /// The whole request, body included.
    pub timeout: Duration,
    pub connect_timeout: Duration,
    /// Attempts after the first, on 5xx and network errors (each one charged).
    pub retries: u32,
    /// The first retry waits up to this long (full jitter); each later one doubles it.
    pub backoff: Duration,
    /// The largest response body read, in bytes: a page past it is an error.
    pub max_body: u64,
}

/// The default `http.max_body`: 32 MiB.
pub const DEFAULT_MAX_BODY: u64 = 32 << 20;

impl Default for HttpSettings {
    fn default() -> Self {
        Self {
            timeout: Duration::from_secs(30),
            connect_timeout: Duration::from_secs(10),
            retries: 3,
            backoff: Duration::from_secs(1),
            max_body: DEFAULT_MAX_BODY,
        }
    }
}

/// A credential: a secret and the quota pools it spends from.
#[derive(Debug)]
pub struct Credential {
    pub name: String,
    pub secret: Secret,
    pub secret_source: SecretSource,
    pub upstream_reset: Option<UpstreamReset>,
    /// Where responses carry the upstream's own counts, per pool.
    pub upstream_headers: Vec<CountHeaders>,
    /// `mode: observe`: every call is charged and recorded, also those
    /// that do not fit, and the ledger never stops a run.
    pub observe: bool,
    pub pools: Vec<Pool>,
    /// Who may take what when jobs compete for the credential (issue 28):
    /// empty without `shares`.
    pub shares: Shares,
    /// The windows whose limit is the upstream's (`from: upstream`), in
    /// `pools` with the cap's limit (else none) until learned.
    pub learned: Vec<LearnedWindow>,
}

impl Credential {
    /// The longest window of any pool: how long a block lasts when the
    /// upstream gives no better answer.
    pub fn longest_window(&self) -> Duration {
        self.pools
            .iter()
            .map(Pool::longest)
            .max()
            .unwrap_or_default()
    }
}

/// What a request does when the store cannot be reached.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum StorePolicy {
    /// Stop the run (exit 69) before the request.
    FailClosed,
    /// Send the request unmetered, and say so.
    FailOpen,
}

/// A job: regions × steps × pages, spending one credential.
#[derive(Debug)]
pub struct Job {
    pub name: String,
    /// Index into [`Config::credentials`].
    pub credential: usize,
    /// Empty when the job has no regions: it then runs its steps once
    /// (or once per input, with `inputs`).
    pub regions: Vec<String>,
    /// The file of keys the job walks instead of regions.
    pub inputs: Option<Inputs>,
    /// `once: true` (only with `inputs`): each input done once, ever.
    pub once: bool,
    pub steps: Vec<Step>,
    /// The folder of page files (absolute: a relative path is taken from
    /// the config file's folder); none: no page files (`output.sqlite` only).
    pub output: Option<PathBuf>,
    /// `output.sqlite`: rows upserted into a table.
    pub sqlite: Option<SqliteOutput>,
    /// `output.postgres`: rows upserted into a PostgreSQL table.
    pub postgres: Option<PostgresOutput>,
    /// `every DURATION`, for planning.
    pub schedule: Option<Duration>,
    /// Requests of a run in flight at once (`concurrency`, default 1).
    pub concurrency: usize,
    /// `max_wait` (default 0): when the ledger refuses a charge and says
    /// the units free up within this, the run waits for them rather than
    /// stopping (`run --wait` overrides it).
    pub max_wait: Duration,
}

impl Job {
    /// Whether a run can write its pages: the output folder, or the nearest
    /// folder above it that exists (a run creates the rest), takes a new
    /// file. Probed by creating one (exclusively, under a name of its own)
    /// and removing it, which is what the permissions, a read-only mount
    /// and the process's capabilities all answer to. The error names the
    /// folder it probed.
    pub fn output_writable(&self) -> std::result::Result<(), (PathBuf, std::io::Error)> {
        match &self.output {
            Some(dir) => folder_writable(dir),
            None => Ok(()),
        }
    }

    /// Whether the job's rows keep `TABLE_runs`, the run that wrote each
    /// input's rows (a once-job of inputs): what a run's open makes and
    /// `check` looks at alike.
    pub fn rows_keep_runs(&self) -> bool {
        self.once && self.inputs.is_some()
    }
}

/// Whether `dir`, or the nearest folder above it that exists, takes a new
/// file (see [`Job::output_writable`]).
pub fn folder_writable(dir: &Path) -> std::result::Result<(), (PathBuf, std::io::Error)> {
    let mut dir = dir;
    while !dir.exists() {
        // (a symbolic link to nothing: the run cannot make the folder
        // through it, whatever its parent takes)
        if dir.symlink_metadata().is_ok() {
            return Err((
                dir.to_path_buf(),
                std::io::Error::new(
                    std::io::ErrorKind::NotFound,
                    "a symbolic link to something that does not exist",
                ),
            ));
        }
        match dir.parent() {
            Some(p) if !p.as_os_str().is_empty() => dir = p,
            _ => {
                dir = Path::new(".");
                break;
            }
        }
    }
    let fail = |e| (dir.to_path_buf(), e);
    if !dir.is_dir() {
        return Err(fail(std::io::Error::new(
            std::io::ErrorKind::NotADirectory,
            "not a directory",
        )));
    }
    let probe = dir.join(format!(
        ".portion-probe.{}.{:016x}",
        std::process::id(),
        rand::random::<u64>()
    ));
    crate::atomic_file::create_exclusive(&probe, 0o600).map_err(fail)?;
    std::fs::remove_file(&probe).map_err(fail)
}

impl Config {
    /// The file `-c` or `$PORTION_CONFIG` named, else `./portion.yaml`.
    pub fn path(explicit: Option<&Path>) -> PathBuf {
        explicit.map_or_else(|| PathBuf::from(DEFAULT_FILE), Path::to_path_buf)
    }

    /// Read, parse and validate `file`, secrets included.
    pub fn load(file: &Path) -> Result<Self> {
        Self::parse(file, &Self::read(file)?, Secrets::Read)
    }

    /// Read, parse and validate `file` as `run` would, except for the
    /// secrets this process cannot see: a systemd credential outside its
    /// unit (`check`).
    pub fn load_visible(file: &Path) -> Result<Self> {
        Self::parse(file, &Self::read(file)?, Secrets::ReadVisible)
    }

    /// Read, parse and validate `file` for a command that never calls the
    /// upstream (`status`, `run --dry-run`): secrets are not read, so an
    /// operator can look without the key in their environment.
    pub fn load_without_secrets(file: &Path) -> Result<Self> {
        Self::parse(file, &Self::read(file)?, Secrets::Skip)
    }

    fn read(file: &Path) -> Result<String> {
        std::fs::read_to_string(file).map_err(|e| Error::Config {
            file: file.to_path_buf(),
            field: String::new(),
            message: format!("cannot read the configuration: {e}"),
        })
    }

    /// Parse and validate `text`, read from `file` (relative paths in it are
    /// taken from the file's folder).
    pub fn parse(file: &Path, text: &str, secrets: Secrets) -> Result<Self> {
        let fail = |field: &str, message: String| Error::Config {
            file: file.to_path_buf(),
            field: field.to_string(),
            message,
        };
        // A UTF-8 byte order mark (Windows editors write one) is not part
        // of the document: the parser would take it for the start of a
        // second one.
        let text = text.strip_prefix('\u{feff}').unwrap_or(text);
        // Pass 1: syntax and duplicate keys, anywhere in the document.
        let mut value: Value =
            serde_yaml::from_str(text).map_err(|e| yaml_error(file, e, ErrorLines::Kept))?;
        if value.is_null() {
            return Err(fail("", "the file is empty".into()));
        }
        // Pass 2: the shape, with unknown keys refused at every level. A file
        // with merge keys or `x-` blocks is read again as the YAML of its
        // resolved value: the errors keep the path of the field, but their
        // line numbers would be those of that text, so they are left out.
        let raw: RawConfig = if resolve(&mut value).map_err(|e| fail("", e.to_string()))? {
            let resolved = serde_yaml::to_string(&value).map_err(|e| fail("", e.to_string()))?;
            serde_yaml::from_str(&resolved).map_err(|e| yaml_error(file, e, ErrorLines::Dropped))?
        } else {
            serde_yaml::from_str(text).map_err(|e| yaml_error(file, e, ErrorLines::Kept))?
        };
        let dir = file
            .parent()
            .map(Path::to_path_buf)
            .filter(|p| !p.as_os_str().is_empty())
            .unwrap_or_else(|| PathBuf::from("."));
        Validator {
            file,
            dir: &dir,
            secrets,
        }
        .config(raw)
    }

    pub fn credential(&self, job: &Job) -> &Credential {
        &self.credentials[job.credential]
    }
}

/// The YAML conveniences the raw structs do not know: merge keys
/// (`<<: *anchor`, or a list of them) are applied, nested ones too, and the
/// top-level keys that start with `x-` (blocks that only hold anchors, as in
/// docker-compose files) are dropped. Unknown keys anywhere else stay
/// errors. Whether anything changed.
fn resolve(value: &mut Value) -> std::result::Result<bool, serde_yaml::Error> {
    fn has_merge(v: &Value) -> bool {
        match v {
            Value::Mapping(m) => m.contains_key("<<") || m.values().any(has_merge),
            Value::Sequence(s) => s.iter().any(has_merge),
            Value::Tagged(t) => has_merge(&t.value),
            _ => false,
        }
    }
    let mut changed = false;
    if let Value::Mapping(m) = value {
        let before = m.len();
        m.retain(|k, _| !k.as_str().is_some_and(|k| k.starts_with("x-")));
        changed = m.len() != before;
    }
    // A merged mapping may itself hold a merge key (an anchor built on
    // another): each pass resolves one level.
    while has_merge(value) {
        value.apply_merge()?;
        changed = true;
    }
    Ok(changed)
}

/// Whether an error's line and column are those of the file.
#[derive(Clone, Copy, PartialEq, Eq)]
enum ErrorLines {
    Kept,
    Dropped,
}

fn yaml_error(file: &Path, e: serde_yaml::Error, lines: ErrorLines) -> Error {
    // serde_yaml writes "path.to.field: message at line L column C".
    let text = e.to_string();
    let (field, message) = match text.split_once(": ") {
        Some((path, rest)) if !path.contains(' ') && !path.is_empty() => {
            (path.to_string(), rest.to_string())
        }
        _ => (String::new(), text.clone()),
    };
    let at = message.rfind(" at line ");
    let message = match (lines, e.location(), at) {
        (ErrorLines::Kept, Some(l), None) => {
            format!("{message} at line {} column {}", l.line(), l.column())
        }
        (ErrorLines::Dropped, _, Some(i)) => message[..i].to_string(),
        _ => message,
    };
    Error::Config {
        file: file.to_path_buf(),
        field,
        message,
    }
}

/// Whether loading reads the secrets.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Secrets {
    Read,
    /// Read as `run` reads them, except a systemd credential outside its
    /// unit ([`SecretSource::outside_its_unit`]), left empty: for `check`,
    /// which says so and checks the rest.
    ReadVisible,
    /// Left empty: for commands that never call the upstream.
    Skip,
}

/// An inputs file must be a regular file (a link to one too): a FIFO's
/// open waits for a writer and a device (`/dev/zero`) never ends, so a run
/// or `check` would hang; the error says what the path is instead.
pub fn regular_file(meta: &std::fs::Metadata) -> std::io::Result<()> {
    use std::os::unix::fs::FileTypeExt;
    let t = meta.file_type();
    let what = if t.is_file() {
        return Ok(());
    } else if t.is_dir() {
        "a directory"
    } else if t.is_fifo() {
        "a FIFO (named pipe)"
    } else if t.is_socket() {
        "a socket"
    } else if t.is_char_device() || t.is_block_device() {
        "a device"
    } else {
        "of another kind"
    };
    Err(std::io::Error::other(format!("{what}, not a file")))
}
