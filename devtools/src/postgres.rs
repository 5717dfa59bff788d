//! A real PostgreSQL server for the tests, from the system's packages (Debian's
//! `postgresql`): `initdb` in a temp dir, then `postgres` on a free loopback port and a unix
//! socket in that dir, with password (SCRAM) authentication over TCP. As root it runs as the
//! `postgres` user (the server refuses root), through `setpriv`, which also stops it when the
//! thread that started it ends: servers are started from a thread that lives as long as the
//! test process, so none outlives the tests.
//!
//! Missing binaries are a loud failure, never a skip: the test command installs the package.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Mutex, OnceLock, mpsc};
use std::time::{Duration, Instant};

/// The superuser's password; tests check that it never shows.
pub const PASSWORD: &str = "pw-Zq7xK2-never-shown";
const USER: &str = "compactd";

/// One server: its directory, port and process.
pub struct PgServer {
    dir: tempfile::TempDir,
    port: u16,
    bin: PathBuf,
    as_postgres_user: bool,
    child: Mutex<Option<Child>>,
}

/// The server shared by every test of this process (each test makes its own database).
pub fn shared() -> &'static PgServer {
    SHARED.get_or_init(|| {
        let server = PgServer::start();
        // A static is never dropped: without this, every test process left its cluster
        // (about 250 MB) in the temp dir, and CI machines filled up.
        // SAFETY: `remove_shared` is an `extern "C" fn` with no arguments, as atexit wants.
        unsafe { libc::atexit(remove_shared) };
        server
    })
}

static SHARED: OnceLock<PgServer> = OnceLock::new();

/// At exit: stops the shared server and removes its directory.
extern "C" fn remove_shared() {
    if let Some(server) = SHARED.get() {
        server.stop();
        let _ = std::fs::remove_dir_all(server.dir.path());
    }
}

/// The directory holding `initdb`, `postgres` and `psql`: the newest under
/// `/usr/lib/postgresql/*/bin`, else `$PATH`.
fn server_bin_dir() -> PathBuf {
    let mut found: Vec<(u32, PathBuf)> = std::fs::read_dir("/usr/lib/postgresql")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| {
            let version = e.file_name().to_string_lossy().parse::<u32>().ok()?;
            let bin = e.path().join("bin");
            bin.join("postgres").exists().then_some((version, bin))
        })
        .collect();
    found.sort();
    if let Some((_, bin)) = found.pop() {
        return bin;
    }
    let on_path = Command::new("sh")
        .args(["-c", "command -v initdb"])
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| PathBuf::from(String::from_utf8_lossy(&o.stdout).trim()));
    match on_path.and_then(|p| p.parent().map(Path::to_path_buf)) {
        Some(dir) => dir,
        None => panic!(
            "PostgreSQL is not installed (no /usr/lib/postgresql/*/bin/postgres, no initdb on \
             PATH): install Debian's `postgresql` package; scripts/test.sh does"
        ),
    }
}

fn is_root() -> bool {
    Command::new("id")
        .arg("-u")
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim() == "0")
        .unwrap_or(false)
}

fn free_port() -> u16 {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind a loopback port");
    listener.local_addr().expect("local address").port()
}

/// Runs `command` (a server binary) as the server's user.
fn as_server_user(bin: &Path, program: &str, root: bool) -> Command {
    if root {
        let mut c = Command::new("setpriv");
        c.args([
            "--reuid=postgres",
            "--regid=postgres",
            "--init-groups",
            "--pdeathsig=INT",
        ])
        .arg(bin.join(program));
        c
    } else {
        Command::new(bin.join(program))
    }
}

/// Every server process is started from this thread, which never ends, so `--pdeathsig`
/// fires only when the test process exits.
fn spawn_from_keeper(mut command: Command) -> std::io::Result<Child> {
    type Job = (Command, mpsc::Sender<std::io::Result<Child>>);
    static KEEPER: OnceLock<Mutex<mpsc::Sender<Job>>> = OnceLock::new();
    let keeper = KEEPER.get_or_init(|| {
        let (tx, rx) = mpsc::channel::<Job>();
        std::thread::Builder::new()
            .name("postgres-keeper".into())
            .spawn(move || {
                for (mut command, reply) in rx {
                    let _ = reply.send(command.spawn());
                }
                // The channel is held by a static: this loop never ends.
            })
            .expect("start the keeper thread");
        Mutex::new(tx)
    });
    let (tx, rx) = mpsc::channel();
    command.stdin(Stdio::null());
    keeper
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .send((command, tx))
        .expect("the keeper thread runs");
    rx.recv().expect("the keeper thread answers")
}

impl PgServer {
    /// Initialises a cluster in a fresh temp dir and starts it.
    pub fn start() -> PgServer {
        let bin = server_bin_dir();
        let root = is_root();
        let dir = tempfile::Builder::new()
            .prefix("compactd-pg-")
            .tempdir()
            .expect("a temp dir");
        let data = dir.path().join("data");
        std::fs::create_dir(&data).unwrap();
        let pwfile = dir.path().join("pw");
        std::fs::write(&pwfile, PASSWORD).unwrap();
        if root {
            let status = Command::new("chown")
                .args(["-R", "postgres:postgres"])
                .arg(dir.path())
                .status()
                .expect("chown runs");
            assert!(
                status.success(),
                "chown to the postgres user failed: is Debian's postgresql package installed?"
            );
            let status = Command::new("chmod")
                .arg("0755")
                .arg(dir.path())
                .status()
                .expect("chmod runs");
            assert!(status.success());
        }
        let output = as_server_user(&bin, "initdb", root)
            .arg("-D")
            .arg(&data)
            .args([
                "-U",
                USER,
                "--auth-local=trust",
                "--auth-host=scram-sha-256",
            ])
            .arg(format!("--pwfile={}", pwfile.display()))
            .args(["--no-sync", "-E", "UTF8", "--locale=C"])
            .output()
            .expect("initdb runs");
        assert!(
            output.status.success(),
            "initdb failed: {}",
            String::from_utf8_lossy(&output.stderr)
        );
        let server = PgServer {
            dir,
            port: free_port(),
            bin,
            as_postgres_user: root,
            child: Mutex::new(None),
        };
        server.start_process();
        server
    }

    fn start_process(&self) {
        let log = std::fs::File::create(self.dir.path().join("server.log")).unwrap();
        let mut command = as_server_user(&self.bin, "postgres", self.as_postgres_user);
        command
            .arg("-D")
            .arg(self.dir.path().join("data"))
            .args(["-c", "listen_addresses=127.0.0.1"])
            .args(["-c", &format!("port={}", self.port)])
            .args([
                "-c",
                &format!("unix_socket_directories={}", self.dir.path().display()),
            ])
            .args(["-c", "fsync=off", "-c", "max_connections=200"])
            // Rows fetched per statement, for the tests that count what a daemon reads.
            .args(["-c", "shared_preload_libraries=pg_stat_statements"])
            .stdout(Stdio::from(log.try_clone().unwrap()))
            .stderr(Stdio::from(log));
        let child = spawn_from_keeper(command).expect("postgres starts");
        *self.child.lock().unwrap() = Some(child);
        self.wait_ready();
    }

    fn wait_ready(&self) {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let ok = self
                .psql("postgres", "SELECT 1")
                .map(|o| o.status.success())
                .unwrap_or(false);
            if ok {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "postgres did not start: {}",
                self.log()
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// The server's log so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("server.log")).unwrap_or_default()
    }

    fn psql(&self, db: &str, sql: &str) -> std::io::Result<std::process::Output> {
        Command::new(self.bin.join("psql"))
            .args(["-X", "-q", "-v", "ON_ERROR_STOP=1", "-h"])
            .arg(self.dir.path())
            .args([
                "-p",
                &self.port.to_string(),
                "-U",
                USER,
                "-d",
                db,
                "-c",
                sql,
            ])
            .stdin(Stdio::null())
            .output()
    }

    /// Runs `sql` in database `db`, panicking on failure; its output (unaligned, tuples only).
    pub fn query(&self, db: &str, sql: &str) -> String {
        let output = Command::new(self.bin.join("psql"))
            .args(["-X", "-q", "-A", "-t", "-v", "ON_ERROR_STOP=1", "-h"])
            .arg(self.dir.path())
            .args([
                "-p",
                &self.port.to_string(),
                "-U",
                USER,
                "-d",
                db,
                "-c",
                sql,
            ])
            .stdin(Stdio::null())
            .output()
            .expect("psql runs");
        assert!(
            output.status.success(),
            "psql {sql:?} failed: {}",
            String::from_utf8_lossy(&output.stderr)
        );
        String::from_utf8_lossy(&output.stdout).trim().to_owned()
    }

    /// A new empty database; its URL (TCP, with the password).
    pub fn create_database(&self) -> String {
        static NEXT: AtomicUsize = AtomicUsize::new(0);
        let name = format!(
            "t{}_{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        );
        self.query("postgres", &format!("CREATE DATABASE {name}"));
        self.url(&name)
    }

    /// The URL of database `db` over TCP with the password.
    pub fn url(&self, db: &str) -> String {
        format!("postgres://{USER}:{PASSWORD}@127.0.0.1:{}/{db}", self.port)
    }

    /// The database name in a URL made by [`PgServer::url`].
    pub fn database_of(url: &str) -> &str {
        url.rsplit('/').next().unwrap_or("postgres")
    }

    /// Stops the server (fast shutdown: open connections are closed).
    pub fn stop(&self) {
        let mut child = self.child.lock().unwrap();
        if let Some(mut c) = child.take() {
            let _ = Command::new("kill")
                .args(["-INT", &c.id().to_string()])
                .status();
            let _ = c.wait();
        }
    }

    /// Starts it again on the same port and data.
    pub fn restart(&self) {
        self.stop();
        self.start_process();
    }
}

impl Drop for PgServer {
    fn drop(&mut self) {
        self.stop();
    }
}
