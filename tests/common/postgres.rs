//! A real PostgreSQL server on a free loopback port, as the Redis fixture
//! starts `redis-server`: `initdb` into a temp dir, `postgres -k DIR -p
//! PORT -h 127.0.0.1`, ready once it answers a query (polled, bounded).
//! One server per test binary ([`shared`]) with a fresh database per test
//! ([`PgServer::database`]); a test that stops the server starts its own
//! ([`PgServer::start`]). There is no mock database: a machine without
//! PostgreSQL fails these tests (CI installs Debian's `postgresql`, whose
//! binaries are in /usr/lib/postgresql/VERSION/bin, off PATH).
//!
//! PostgreSQL refuses to run as root: as root (CI, this machine) the
//! server runs as the `postgres` user the Debian package makes, its dirs
//! given to it. Each server dies with the thread that started it
//! (`PR_SET_PDEATHSIG`), so none outlives the test binary: the shared one
//! is started by a thread that never ends.

use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use super::free_port;

/// The superuser the tests (and `portion`) log in as, and its password.
pub const USER: &str = "portion";
pub const PASSWORD: &str = "pg-secret-3e9d";

/// On a [`PgServer::start_tls`] server, a role refused without TLS.
pub const TLS_ONLY: &str = "tls_only";

/// A `postgres` child process on 127.0.0.1, its data in a temp dir.
pub struct PgServer {
    child: Child,
    pub port: u16,
    dir: tempfile::TempDir,
    /// Further `postgres` arguments (TLS).
    extra: Vec<String>,
    /// Databases made so far (each test its own).
    made: AtomicU32,
}

/// The folder of PostgreSQL's server binaries: `initdb` on PATH, else the
/// newest Debian version's bin folder.
fn bin_dir() -> PathBuf {
    let on_path = std::env::var_os("PATH")
        .map(|p| std::env::split_paths(&p).collect::<Vec<_>>())
        .unwrap_or_default()
        .into_iter()
        .find(|d| d.join("initdb").is_file() && d.join("postgres").is_file());
    if let Some(dir) = on_path {
        return dir;
    }
    let mut versions: Vec<(u32, PathBuf)> = std::fs::read_dir("/usr/lib/postgresql")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| {
            let v = e.file_name().to_str()?.parse::<u32>().ok()?;
            let bin = e.path().join("bin");
            bin.join("initdb").is_file().then_some((v, bin))
        })
        .collect();
    versions.sort();
    versions.pop().map(|(_, b)| b).expect(
        "PostgreSQL's initdb and postgres must be installed (apt-get install postgresql); tests never skip without them",
    )
}

/// As root: the uid and gid of the `postgres` user to run the server as.
fn server_user() -> Option<(u32, u32)> {
    if unsafe { libc::geteuid() } != 0 {
        return None;
    }
    let name = std::ffi::CString::new("postgres").unwrap();
    let pw = unsafe { libc::getpwnam(name.as_ptr()) };
    assert!(
        !pw.is_null(),
        "PostgreSQL refuses to run as root and there is no `postgres` user to run it as (Debian's postgresql package makes it)"
    );
    Some(unsafe { ((*pw).pw_uid, (*pw).pw_gid) })
}

/// `program` of PostgreSQL's bin folder, run as the server's user, dying
/// with the thread that starts it.
fn pg_command(program: &str) -> Command {
    let mut cmd = Command::new(bin_dir().join(program));
    let user = server_user();
    unsafe {
        cmd.pre_exec(move || {
            if let Some((uid, gid)) = user
                && (libc::setgroups(0, std::ptr::null()) != 0
                    || libc::setgid(gid) != 0
                    || libc::setuid(uid) != 0)
            {
                return Err(std::io::Error::last_os_error());
            }
            // (after setuid, which clears it)
            libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGQUIT);
            Ok(())
        });
    }
    cmd
}

/// Give `path` to the server's user (as root).
fn give(path: &Path) {
    if let Some((uid, gid)) = server_user() {
        std::os::unix::fs::chown(path, Some(uid), Some(gid)).expect("chown to postgres");
    }
}

impl PgServer {
    /// A fresh cluster and its server on a free port. Panics when
    /// PostgreSQL is missing or does not come up: tests never skip.
    pub fn start() -> Self {
        Self::start_with(|_| Vec::new())
    }

    /// A server that speaks TLS with `ca`'s server certificate (for
    /// `localhost` and 127.0.0.1), and refuses role [`TLS_ONLY`] without it.
    pub fn start_tls(ca: &super::tls::TestCa) -> Self {
        Self::start_with(|data| {
            for (from, to) in [("server.pem", "server.crt"), ("server.key", "server.key")] {
                let to = data.join(to);
                std::fs::copy(ca.file(from), &to).unwrap();
                give(&to);
                std::fs::set_permissions(&to, std::os::unix::fs::PermissionsExt::from_mode(0o600))
                    .unwrap();
            }
            let hba = data.join("pg_hba.conf");
            let rest = std::fs::read_to_string(&hba).unwrap();
            let first = format!("hostnossl all {TLS_ONLY} 127.0.0.1/32 reject\n");
            std::fs::write(&hba, first + &rest).unwrap();
            [
                "ssl=on",
                "ssl_cert_file=server.crt",
                "ssl_key_file=server.key",
            ]
            .iter()
            .flat_map(|s| ["-c".to_string(), s.to_string()])
            .collect()
        })
    }

    /// A fresh cluster, `tune` given its data dir before the server starts
    /// and answering the server's further arguments.
    fn start_with(tune: impl FnOnce(&Path) -> Vec<String>) -> Self {
        let dir = tempfile::tempdir().expect("temp dir");
        give(dir.path());
        let pwfile = dir.path().join("pw");
        std::fs::write(&pwfile, PASSWORD).unwrap();
        give(&pwfile);
        let out = pg_command("initdb")
            .arg("-D")
            .arg(dir.path().join("data"))
            .args([
                "-U",
                USER,
                "--auth-local=trust",
                "--auth-host=scram-sha-256",
            ])
            .args(["-E", "UTF8", "--no-sync", "--locale=C"])
            .arg(format!("--pwfile={}", pwfile.display()))
            .stdin(Stdio::null())
            .output()
            .expect("run initdb");
        assert!(
            out.status.success(),
            "initdb failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let extra = tune(&dir.path().join("data"));
        for _ in 0..5 {
            let port = free_port();
            let mut child = spawn_postgres(dir.path(), port, &extra);
            if wait_ready(&mut child, port, Duration::from_secs(30)) {
                return PgServer {
                    child,
                    port,
                    dir,
                    extra,
                    made: AtomicU32::new(0),
                };
            }
            // (the port taken between probe and bind, most likely)
            quit(&mut child);
        }
        panic!("postgres did not start on a free loopback port");
    }

    /// Stop the server at once (SIGQUIT: an immediate shutdown, as a crash
    /// is; its clients' connections are cut) and wait for it to be gone.
    pub fn stop(&mut self) {
        quit(&mut self.child);
    }

    /// Start the server again on the same port and data dir.
    pub fn restart(&mut self) {
        self.child = spawn_postgres(self.dir.path(), self.port, &self.extra);
        assert!(
            wait_ready(&mut self.child, self.port, Duration::from_secs(30)),
            "postgres did not come back"
        );
    }

    /// A URL of database `db` on this server, with the password.
    pub fn url(&self, db: &str) -> String {
        format!("postgres://{USER}:{PASSWORD}@127.0.0.1:{}/{db}", self.port)
    }

    /// A connection of the tests' own to database `db`.
    pub fn connect(&self, db: &str) -> Result<postgres::Client, postgres::Error> {
        connect(self.port, db)
    }

    /// A new, empty database of its own for a test: its name.
    pub fn database(&self) -> String {
        let n = self.made.fetch_add(1, Ordering::SeqCst);
        let name = format!("t{}_{n}", std::process::id());
        let mut c = self.connect("postgres").expect("connect to postgres");
        c.batch_execute(&format!("CREATE DATABASE \"{name}\""))
            .expect("create a database");
        name
    }
}

impl Drop for PgServer {
    fn drop(&mut self) {
        self.stop();
    }
}

fn spawn_postgres(dir: &Path, port: u16, extra: &[String]) -> Child {
    pg_command("postgres")
        .arg("-D")
        .arg(dir.join("data"))
        .arg("-k")
        .arg(dir)
        .args(["-p", &port.to_string(), "-h", "127.0.0.1"])
        // (fsync off: the tests' exactness is the sink's commits and the
        // cursor's order, which a kill of the client tests, not a power cut)
        .args(["-c", "fsync=off", "-c", "max_connections=200"])
        .args(extra)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("start postgres")
}

/// A connection to database `db` of the server on `port`.
fn connect(port: u16, db: &str) -> Result<postgres::Client, postgres::Error> {
    let mut config = postgres::Config::new();
    config
        .host("127.0.0.1")
        .port(port)
        .user(USER)
        .password(PASSWORD)
        .dbname(db)
        .connect_timeout(Duration::from_secs(5));
    config.connect(postgres::NoTls)
}

/// Whether the server `child` answers a query on `port` within `limit`
/// (polled): false once it has exited.
fn wait_ready(child: &mut Child, port: u16, limit: Duration) -> bool {
    let start = Instant::now();
    while start.elapsed() < limit {
        if let Ok(Some(_)) = child.try_wait() {
            return false;
        }
        if let Ok(mut c) = connect(port, "postgres")
            && let Ok(row) = c.query_one("SELECT pg_backend_pid()", &[])
        {
            // (our server, not another test's on a port we were given:
            // its postmaster is our child, the backend's parent)
            let backend: i32 = row.get(0);
            return parent_of(backend as u32) == Some(child.id());
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    false
}

/// Stop a server at once (SIGQUIT: an immediate shutdown) and reap it.
fn quit(child: &mut Child) {
    unsafe { libc::kill(child.id() as libc::pid_t, libc::SIGQUIT) };
    let _ = child.wait();
}

/// The parent process of `pid` (`/proc/PID/stat`'s fourth field).
fn parent_of(pid: u32) -> Option<u32> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let after = &stat[stat.rfind(')')? + 1..];
    after.split_whitespace().nth(1)?.parse().ok()
}

/// The test binary's one server, started by a thread that lives as long
/// as the binary (the server dies with it).
pub fn shared() -> &'static PgServer {
    static SERVER: OnceLock<&'static PgServer> = OnceLock::new();
    SERVER.get_or_init(|| {
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let server: &'static PgServer = Box::leak(Box::new(PgServer::start()));
            tx.send(server).unwrap();
            loop {
                std::thread::park();
            }
        });
        rx.recv().expect("the shared postgres did not start")
    })
}
