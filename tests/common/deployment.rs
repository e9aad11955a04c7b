//! The binary tests' fixture: a deployment folder (`portion.yaml`, a key file,
//! outputs under `out/`), the YAML it is written from, and the `portion`
//! binary run in it with a clean environment.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

use super::standin::Standin;
use super::yaml::{Config, Credential, Endpoint, Job, Step, limit};

/// The `portion` binary under test.
pub fn portion_bin() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_portion"))
}

/// A `portion` command with a clean environment: no inherited PORTION_* or
/// RUST_LOG, state under `home` so nothing touches the real home.
pub fn portion(home: &Path) -> Command {
    portion_via(&[], home)
}

/// [`portion`] started by `wrapper` (a program and its first arguments, such
/// as `faketime -f TIME`), which gets the same clean environment.
pub fn portion_via(wrapper: &[&str], home: &Path) -> Command {
    let mut c = match wrapper.split_first() {
        None => Command::new(portion_bin()),
        Some((program, args)) => {
            let mut c = Command::new(program);
            c.args(args).arg(portion_bin());
            c
        }
    };
    c.env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .env("HOME", home)
        .env("XDG_STATE_HOME", home.join("state"));
    c
}

/// The finished output of a command: exit code, stdout, stderr.
pub struct Ran {
    pub code: i32,
    pub stdout: String,
    pub stderr: String,
}

impl Ran {
    pub fn all(&self) -> String {
        format!("{}{}", self.stdout, self.stderr)
    }
}

impl std::fmt::Debug for Ran {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "exit {}\n--- stdout\n{}--- stderr\n{}",
            self.code, self.stdout, self.stderr
        )
    }
}

pub fn run(cmd: &mut Command) -> Ran {
    let out = cmd
        .output()
        .unwrap_or_else(|e| panic!("cannot run {:?}: {e}", cmd.get_program()));
    Ran {
        code: out.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

/// [`run`], and the command's peak memory (its maximum resident set size,
/// in bytes, from `wait4`'s resource usage of that one process).
// The child is reaped by wait4, which std does not know about.
#[allow(clippy::zombie_processes)]
pub fn run_measured(cmd: &mut Command) -> (Ran, u64) {
    use std::io::Read;
    let mut child = spawn(cmd);
    let mut out = child.stdout.take().unwrap();
    let mut err = child.stderr.take().unwrap();
    let stdout = std::thread::spawn(move || {
        let mut s = Vec::new();
        let _ = out.read_to_end(&mut s);
        s
    });
    let mut stderr = Vec::new();
    let _ = err.read_to_end(&mut stderr);
    let stdout = stdout.join().unwrap();
    let mut status = 0;
    // SAFETY: an all-zero rusage is a valid value, and wait4 writes it for
    // a child of ours that std has not reaped (we never call child.wait()).
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    let pid = child.id() as libc::pid_t;
    let reaped = unsafe { libc::wait4(pid, &mut status, 0, &mut usage) };
    assert_eq!(reaped, pid, "wait4: {}", std::io::Error::last_os_error());
    let code = if libc::WIFEXITED(status) {
        libc::WEXITSTATUS(status)
    } else {
        -1
    };
    let ran = Ran {
        code,
        stdout: String::from_utf8_lossy(&stdout).into_owned(),
        stderr: String::from_utf8_lossy(&stderr).into_owned(),
    };
    // Linux reports ru_maxrss in KiB.
    (ran, usage.ru_maxrss as u64 * 1024)
}

/// Start a command in the background, its output captured.
pub fn spawn(cmd: &mut Command) -> Child {
    cmd.stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn portion")
}

/// Wait for a command started with [`spawn`].
pub fn finish(child: Child) -> Ran {
    let out = child.wait_with_output().unwrap();
    Ran {
        code: out.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

/// Send `sig` (e.g. "-TERM") to process `pid`.
pub fn kill(sig: &str, pid: u32) {
    let ok = Command::new("kill")
        .args([sig, &pid.to_string()])
        .status()
        .unwrap()
        .success();
    assert!(ok, "kill {sig} {pid}");
}

/// A wrapper (for [`Deployment::cmd_via`]) under which `portion` cannot write
/// where permissions say no: none for a user; for root, which writes
/// anywhere otherwise, `setpriv` dropping CAP_DAC_OVERRIDE and
/// CAP_DAC_READ_SEARCH from the bounding set. `read_only` is a folder the
/// test made read-only: whether this process can still write there decides.
pub fn bound_by_permissions(read_only: &Path) -> Vec<&'static str> {
    let probe = read_only.join(".can-i-write");
    match std::fs::write(&probe, "") {
        Err(_) => vec![],
        Ok(()) => {
            std::fs::remove_file(&probe).unwrap();
            vec!["setpriv", "--bounding-set=-dac_override,-dac_read_search"]
        }
    }
}

/// A deployment for the binary tests: a folder with `portion.yaml`, the key
/// file `key` (holding `demo-key`, what the stand-in accepts), outputs
/// under `out/`.
pub struct Deployment {
    pub dir: tempfile::TempDir,
}

impl Deployment {
    /// For each case (name, text in `good`, what replaces it, what the
    /// error must say): `check` and `run` of the edited file exit 78,
    /// naming the file and saying each expected text.
    pub fn assert_each_edit_exits_78(&self, good: &str, cases: &[(&str, &str, &str, &[&str])]) {
        let file = self.config().display().to_string();
        for (name, from, to, expect) in cases {
            assert!(good.contains(from), "{name}: {from:?} not in the base");
            self.write(&good.replacen(from, to, 1));
            for cmd in ["check", "run"] {
                let r = self.portion(&[cmd]);
                assert_eq!(r.code, 78, "{name} ({cmd}): {r:?}");
                assert!(
                    r.stderr.contains(&file),
                    "{name} ({cmd}) names the file: {r:?}"
                );
                for want in *expect {
                    assert!(
                        r.stderr.contains(want),
                        "{name} ({cmd}) must say {want:?}: {r:?}"
                    );
                }
            }
        }
    }

    pub fn new(yaml: &str) -> Self {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("key"), "demo-key\n").unwrap();
        let d = Deployment { dir };
        d.write(yaml);
        d
    }

    pub fn write(&self, yaml: &str) {
        std::fs::write(self.config(), yaml).unwrap();
    }

    pub fn config(&self) -> PathBuf {
        self.dir.path().join("portion.yaml")
    }

    pub fn path(&self) -> &Path {
        self.dir.path()
    }

    /// `portion -c portion.yaml ARGS…`, not yet run.
    pub fn cmd(&self, args: &[&str]) -> Command {
        self.cmd_via(&[], args)
    }

    /// [`Deployment::cmd`] started by `wrapper` (see [`portion_via`]).
    pub fn cmd_via(&self, wrapper: &[&str], args: &[&str]) -> Command {
        let mut c = portion_via(wrapper, self.dir.path());
        c.arg("-c").arg(self.config()).args(args);
        c
    }

    pub fn portion(&self, args: &[&str]) -> Ran {
        run(&mut self.cmd(args))
    }

    /// `portion run` once the lock of a run killed before it released it has
    /// expired by itself (the config's `lock_ttl`; given up after 10 s).
    pub fn run_after_killed_lock(&self) -> Ran {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        loop {
            let r = self.portion(&["run"]);
            if !(r.code == 75 && r.stderr.contains("another run holds the lock")) {
                return r;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "the lock never expired"
            );
            std::thread::sleep(std::time::Duration::from_millis(200));
        }
    }

    /// `portion status --json`, which must succeed, parsed.
    pub fn status_json(&self) -> serde_json::Value {
        let r = self.portion(&["status", "--json"]);
        assert_eq!(r.code, 0, "{r:?}");
        serde_json::from_str(&r.stdout).unwrap()
    }

    /// Output files of `job` (visible ones), sorted by name.
    pub fn outputs(&self, job: &str) -> Vec<String> {
        let mut v: Vec<String> = std::fs::read_dir(self.dir.path().join("out").join(job))
            .map(|rd| {
                rd.map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
                    .filter(|n| !n.starts_with('.'))
                    .collect()
            })
            .unwrap_or_default();
        v.sort();
        v
    }
}

/// A `store:` value for each kind of store the binary tests run against.
pub fn embedded_store(d: &Deployment) -> String {
    format!("embedded:{}", d.path().join("ledger.sqlite3").display())
}

/// A videos.list step against the stand-in at `base`, paginated by token
/// up to `max_pages` pages.
pub fn videos_list(base: &str, max_pages: u32) -> Step {
    Step::new("videos.list")
        .url(&format!("{base}/youtube/v3/videos"))
        .query(r#"{ part: snippet, chart: mostPopular, regionCode: "{region}", key: "{secret}" }"#)
        .paginate(&format!(
            "{{ token: /nextPageToken, param: pageToken, max_pages: {max_pages} }}"
        ))
}

/// A YAML job block: `regions`, one videos.list step with `max_pages`.
pub fn videos_job(
    name: &str,
    credential: &str,
    regions: &[&str],
    max_pages: u32,
    base: &str,
) -> String {
    Job::new(name, credential)
        .regions(regions)
        .step(videos_list(base, max_pages))
        .to_string()
}

/// The start of the binary tests' configurations: `store`, a short lock,
/// quick HTTP settings, and credential `main` (secret from the `key`
/// file) with a `units` pool of `windows` (see [`limit`]).
pub fn main_units(store: &str, windows: &[&str]) -> Config {
    Config::new(store)
        .lock_ttl("2s")
        .http("{ timeout: 5s, connect_timeout: 2s, retries: 3, backoff: 20ms }")
        .credential(Credential::new("main").pool("units", windows))
}

/// A whole configuration: [`main_units`], videos.list costing 1 unit
/// (`policy` when the store is down), and the given jobs.
pub fn deployment_yaml(store: &str, windows: &[&str], policy: &str, jobs: &[String]) -> String {
    main_units(store, windows)
        .endpoint_with(Endpoint::new("videos.list", "{ units: 1 }").set("on_store_error", policy))
        .jobs_text(&jobs.concat())
        .render()
}

/// A budget no test reaches: 1000 units an hour.
pub const WIDE: &[&str] = &["{ limit: 1000, per: 1h }"];

/// A deployment with one job, `trending`, over `regions` (up to `max_pages`
/// pages each) against the stand-in `up`, with the [`WIDE`] budget, on
/// `store` ("embedded": a file in the deployment's folder).
pub fn trending(
    up: &Standin,
    store: &str,
    regions: &[&str],
    max_pages: u32,
    policy: &str,
) -> Deployment {
    trending_with(up, store, WIDE, regions, max_pages, policy)
}

/// [`trending`] with the given windows of the `units` pool.
pub fn trending_with(
    up: &Standin,
    store: &str,
    windows: &[&str],
    regions: &[&str],
    max_pages: u32,
    policy: &str,
) -> Deployment {
    let d = Deployment::new("");
    let store = if store == "embedded" {
        embedded_store(&d)
    } else {
        store.to_string()
    };
    let job = videos_job("trending", "main", regions, max_pages, &up.base());
    d.write(&deployment_yaml(&store, windows, policy, &[job]));
    d
}

/// A one-region job `name` (region GB) whose one step asks `url`, the key
/// in `query`, paginated by token: for tests of how answers are read.
pub fn one_region_job(name: &str, url: &str) -> String {
    let ask = Step::new("api")
        .url(&format!("\"{url}\""))
        .query(r#"{ chart: mostPopular, regionCode: "{region}", key: "{secret}" }"#)
        .paginate("{ token: /nextPageToken, param: pageToken, max_pages: 10 }");
    Job::new(name, "main")
        .regions(&["GB"])
        .step(ask)
        .to_string()
}

/// A deployment of `jobs` (YAML blocks) against the stand-in: credential
/// `main` (the `key` file), endpoint `api` costing 1 unit of a wide pool.
pub fn api_deployment(jobs: &str) -> Deployment {
    let d = Deployment::new("");
    d.write(&api_yaml(&embedded_store(&d), jobs));
    d
}

/// [`api_deployment`]'s configuration, on `store`.
pub fn api_yaml(store: &str, jobs: &str) -> String {
    Config::new(store)
        .lock_ttl("2s")
        .http("{ timeout: 5s, connect_timeout: 2s, retries: 1, backoff: 20ms }")
        .credential(Credential::new("main").pool("requests", &[limit(1000, "1h")]))
        .endpoint("api", "1")
        .jobs_text(jobs)
        .render()
}
