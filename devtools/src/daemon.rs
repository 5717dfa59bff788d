//! Drives the built `compactd` binary over real pipes, like a client would: a temp home
//! (`COMPACTD_CONFIG_DIR`, `COMPACTD_DATA_DIR`), NDJSON or LSP framing, a timeout on every
//! read, and a check at the end that every message the server sent was consumed.
//!
//! Messages that arrive while waiting for something else are kept in order in a buffer;
//! `expect_notification` / `expect_request` take from it first. [`DaemonProcess::finish`]
//! sends `shutdown` and `exit`, reads to EOF and fails if anything was left unread.

use std::collections::VecDeque;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::process::{Child, ChildStdin, ChildStdout, Command};

/// Bytes read from the daemon's stdout and not yet taken as a message or a line. Every read
/// goes through it, not through a local of the reading call, so a read cut short by a timeout
/// (`pump`) loses nothing: the next read goes on from its bytes.
#[derive(Default)]
struct Inbox {
    bytes: Vec<u8>,
    /// `bytes[..taken]` were taken. They are dropped at the next read, so taking the many
    /// small messages of one read moves no bytes.
    taken: usize,
    /// `bytes[..searched]` hold no line end past `taken`: a line that comes in many reads is
    /// searched once, not from its start at every read.
    searched: usize,
}

impl Inbox {
    /// Reads what `stdout` has onto the end; `false` at EOF. Cancel-safe: `read_buf` reads
    /// nothing unless it completes.
    async fn fill(&mut self, stdout: &mut ChildStdout) -> bool {
        self.bytes.drain(..self.taken);
        self.searched = self.searched.saturating_sub(self.taken);
        self.taken = 0;
        self.bytes.reserve(64 << 10);
        stdout.read_buf(&mut self.bytes).await.expect("read stdout") > 0
    }

    fn unread(&self) -> &[u8] {
        &self.bytes[self.taken..]
    }

    /// Takes the next `n` unread bytes.
    fn take(&mut self, n: usize) -> &[u8] {
        let from = self.taken;
        self.taken += n;
        &self.bytes[from..self.taken]
    }

    /// The length of the first unread line, its `\n` included; `None` until one has come.
    fn line_len(&mut self) -> Option<usize> {
        let from = self.searched.max(self.taken);
        match self.bytes[from..].iter().position(|&b| b == b'\n') {
            Some(i) => {
                self.searched = from + i;
                Some(from + i + 1 - self.taken)
            }
            None => {
                self.searched = self.bytes.len();
                None
            }
        }
    }
}

/// Every read waits at most this long.
pub const READ_TIMEOUT: Duration = Duration::from_secs(30);

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Framing {
    #[default]
    Ndjson,
    Lsp,
}

/// How to start the daemon.
#[derive(Default)]
pub struct SpawnOptions {
    pub framing: Framing,
    /// The user settings file, if any.
    pub settings: Option<Value>,
    /// Extra environment variables.
    pub env: Vec<(String, String)>,
    /// Where stderr goes; inherited when `None`.
    pub stderr: Option<std::fs::File>,
    /// A program and its arguments to run the daemon under (e.g. `strace -f -o log`).
    pub wrapper: Vec<String>,
    /// Run the daemon as this user id (and the group of the same number), with no
    /// supplementary groups (`setpriv`, inside the wrapper); its temp home is given to that
    /// user. For permission tests: root is not refused anything.
    pub run_as: Option<u32>,
}

pub struct DaemonProcess {
    child: Child,
    stdin: Option<ChildStdin>,
    stdout: ChildStdout,
    inbox: Inbox,
    framing: Framing,
    buffer: VecDeque<Value>,
    next_id: i64,
    /// Every message sent and received, in order, once [`DaemonProcess::record`] was called.
    transcript: Option<Vec<Transcribed>>,
    /// `session/entriesAppended` notifications marked `external` (another daemon's appends,
    /// pushed whenever the database announces them) are not counted as unread.
    ignore_external_appends: bool,
    pub home: tempfile::TempDir,
    /// The database its sessions are stored in (`DATABASE_URL`), when it was given one.
    database_url: Option<String>,
}

/// One message of a recorded conversation with the daemon.
#[derive(Debug, Clone)]
pub struct Transcribed {
    /// `true` for what the test sent to the daemon, `false` for what the daemon sent.
    pub from_client: bool,
    pub message: Value,
}

impl DaemonProcess {
    /// Spawns `compactd` (no arguments) with a fresh temp home and NDJSON framing.
    pub async fn spawn() -> Self {
        Self::spawn_with(Framing::Ndjson, None).await
    }

    /// Spawns with `framing` and, if given, a user settings file with `settings`.
    pub async fn spawn_with(framing: Framing, settings: Option<Value>) -> Self {
        Self::spawn_opts(SpawnOptions {
            framing,
            settings,
            ..SpawnOptions::default()
        })
        .await
    }

    /// Spawns with every option of [`SpawnOptions`].
    pub async fn spawn_opts(opts: SpawnOptions) -> Self {
        let SpawnOptions {
            framing,
            settings,
            env,
            stderr,
            mut wrapper,
            run_as,
        } = opts;
        let (settings, env) = on_test_backend(settings, env);
        let database_url = env
            .iter()
            .find(|(k, _)| k == "DATABASE_URL")
            .map(|(_, v)| v.clone());
        let home = tempfile::tempdir().expect("a temp dir");
        let config = home.path().join("config");
        let data = home.path().join("data");
        std::fs::create_dir_all(&config).unwrap();
        std::fs::create_dir_all(&data).unwrap();
        std::fs::create_dir_all(home.path().join("project")).unwrap();
        if let Some(settings) = settings {
            std::fs::write(config.join("settings.json"), settings.to_string()).unwrap();
        }
        if let Some(uid) = run_as {
            for dir in [home.path(), &config, &data, &home.path().join("project")] {
                std::os::unix::fs::chown(dir, Some(uid), Some(uid)).expect("chown the temp home");
            }
            if config.join("settings.json").exists() {
                std::os::unix::fs::chown(config.join("settings.json"), Some(uid), Some(uid))
                    .expect("chown the settings file");
            }
            wrapper.extend([
                "setpriv".to_owned(),
                format!("--reuid={uid}"),
                format!("--regid={uid}"),
                "--clear-groups".to_owned(),
            ]);
        }
        let binary = crate::fixtures::compactd_bin();
        let mut command = match wrapper.split_first() {
            Some((program, args)) => {
                let mut c = Command::new(program);
                c.args(args).arg(binary);
                c
            }
            None => Command::new(binary),
        };
        command
            .env("COMPACTD_CONFIG_DIR", &config)
            .env("COMPACTD_DATA_DIR", &data)
            // The default blob store is under the home directory: keep it in the test's.
            .env("HOME", home.path())
            .env_remove("OPENAI_API_KEY")
            .env_remove("ANTHROPIC_API_KEY")
            .current_dir(home.path())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(match stderr {
                Some(file) => Stdio::from(file),
                None => Stdio::inherit(),
            })
            .kill_on_drop(true);
        for (name, value) in env {
            command.env(name, value);
        }
        let mut child = command.spawn().expect("the compactd binary starts");
        let stdin = child.stdin.take();
        let stdout = child.stdout.take().expect("piped stdout");
        DaemonProcess {
            child,
            stdin,
            stdout,
            inbox: Inbox::default(),
            framing,
            buffer: VecDeque::new(),
            next_id: 1,
            transcript: None,
            ignore_external_appends: false,
            home,
            database_url,
        }
    }

    /// Everything stored for the session at `path` (what its `SessionInfo` shows), as JSONL:
    /// the file's bytes, or for `postgres:ID` the export of the stored session from this
    /// daemon's database (the bytes a file would hold).
    pub fn stored_bytes(&self, path: &str) -> Vec<u8> {
        let Some(id) = path.strip_prefix("postgres:") else {
            return std::fs::read(path).unwrap_or_else(|e| panic!("{path}: {e}"));
        };
        let mut out = Vec::new();
        self.database(path)
            .export(id, &mut out, &mut |_, _| {})
            .unwrap_or_else(|e| panic!("{path}: {e}"));
        out
    }

    /// The session at `path` (what its `SessionInfo` shows) loaded whole by this process, as
    /// another reader would: the file, or for `postgres:ID` the rows in this daemon's
    /// database.
    pub fn stored_session(
        &self,
        path: &str,
    ) -> (compactd::session::Session, compactd::session::LoadReport) {
        use compactd::session::{Catalog, Session};
        let (mut session, report) = match path.strip_prefix("postgres:") {
            Some(id) => self.database(path).open_session(id),
            None => Session::open(path),
        }
        .unwrap_or_else(|e| panic!("{path}: {e}"));
        session.load_whole().expect("the whole session loads");
        (session, report)
    }

    /// A connection of the test's own to this daemon's database.
    fn database(&self, path: &str) -> std::sync::Arc<compactd::testkit::PgStore> {
        let url = self
            .database_url
            .as_deref()
            .unwrap_or_else(|| panic!("{path}: this daemon was given no database"));
        compactd::testkit::PgStore::connect(&compactd::testkit::PgOptions {
            url: url.to_owned(),
            pool_size: 1,
            timeout: Duration::from_secs(30),
            fresh_reads: true,
        })
        .expect("the test database accepts connections")
    }

    /// The entries (after the header) stored for the session at `path`, as
    /// [`file_entries`] reads a file's.
    pub fn stored_entries(&self, path: &str) -> Vec<Value> {
        entries_of(&self.stored_bytes(path))
    }

    /// Records every message sent (by [`Self::send`] and the helpers built on it, not
    /// [`Self::send_raw`]) and received from now on.
    pub fn record(&mut self) {
        self.transcript.get_or_insert_with(Vec::new);
    }

    /// The messages recorded since [`Self::record`], in the order they were sent or read.
    pub fn take_transcript(&mut self) -> Vec<Transcribed> {
        self.transcript.take().unwrap_or_default()
    }

    /// The daemon's process id.
    pub fn pid(&self) -> u32 {
        self.child.id().expect("compactd is running")
    }

    /// Kills the daemon (SIGKILL on Unix) and waits for it.
    pub async fn kill(mut self) {
        let _ = self.child.kill().await;
    }

    /// The response to `id` if it already arrived (buffered), without waiting.
    pub fn take_response(&mut self, id: i64) -> Option<Value> {
        let at = self.buffer.iter().position(|m| is_response(m, id))?;
        self.buffer.remove(at)
    }

    /// Reads whatever the server sends within `wait` into the buffer.
    pub async fn pump(&mut self, wait: Duration) {
        let deadline = tokio::time::Instant::now() + wait;
        loop {
            let remaining = deadline.saturating_duration_since(tokio::time::Instant::now());
            if remaining.is_zero() {
                return;
            }
            match tokio::time::timeout(remaining, self.read_message()).await {
                Ok(Some(message)) => self.buffer.push_back(message),
                Ok(None) | Err(_) => return,
            }
        }
    }

    /// Removes and returns every buffered server-to-client request of `method`.
    pub fn take_all_requests(&mut self, method: &str) -> Vec<Value> {
        let (taken, kept): (Vec<Value>, Vec<Value>) = self
            .buffer
            .drain(..)
            .partition(|m| m["method"] == method && m.get("id").is_some());
        self.buffer = kept.into();
        taken
    }

    /// Removes and returns every buffered message.
    pub fn drain_buffer(&mut self) -> Vec<Value> {
        self.buffer.drain(..).collect()
    }

    /// The project directory inside the temp home.
    pub fn project(&self) -> PathBuf {
        self.home.path().join("project")
    }

    pub fn data_dir(&self) -> PathBuf {
        self.home.path().join("data")
    }

    /// Takes the daemon's stdin, e.g. to write from another task while this one reads (a
    /// client that writes faster than the daemon answers must not block its own reading).
    /// [`Self::give_stdin`] puts it back.
    pub fn take_stdin(&mut self) -> ChildStdin {
        self.stdin.take().expect("stdin is open")
    }

    /// Puts back what [`Self::take_stdin`] took.
    pub fn give_stdin(&mut self, stdin: ChildStdin) {
        self.stdin = Some(stdin);
    }

    /// The next NDJSON line from the wire, unparsed (for answers too large to parse cheaply);
    /// `None` at EOF. Not recorded in the transcript, and the buffer is not looked at.
    pub async fn receive_line(&mut self) -> Option<String> {
        assert_eq!(self.framing, Framing::Ndjson, "lines are NDJSON");
        let read = async {
            loop {
                if let Some(n) = self.inbox.line_len() {
                    break Some(self.inbox.take(n).to_vec());
                }
                if !self.inbox.fill(&mut self.stdout).await {
                    // A last line without its newline, as `read_line` would give it.
                    let rest = self.inbox.unread().len();
                    break (rest > 0).then(|| self.inbox.take(rest).to_vec());
                }
            }
        };
        let line = tokio::time::timeout(READ_TIMEOUT, read)
            .await
            .expect("compactd answered in time")?;
        Some(String::from_utf8(line).expect("the server sends UTF-8"))
    }

    /// Writes raw bytes to the server's stdin.
    pub async fn send_raw(&mut self, bytes: &[u8]) {
        let stdin = self.stdin.as_mut().expect("stdin is open");
        stdin.write_all(bytes).await.expect("write to compactd");
        stdin.flush().await.expect("flush to compactd");
    }

    pub async fn send(&mut self, message: Value) {
        let framed = self.framed(message);
        self.send_raw(framed.as_bytes()).await;
    }

    /// `message` framed for the wire, recorded in the transcript if one is kept.
    fn framed(&mut self, message: Value) -> String {
        let body = message.to_string();
        if let Some(transcript) = &mut self.transcript {
            transcript.push(Transcribed {
                from_client: true,
                message,
            });
        }
        match self.framing {
            Framing::Ndjson => format!("{body}\n"),
            Framing::Lsp => format!("Content-Length: {}\r\n\r\n{body}", body.len()),
        }
    }

    pub async fn send_request(&mut self, method: &str, params: Value) -> i64 {
        let id = self.next_id;
        self.next_id += 1;
        self.send(json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}))
            .await;
        id
    }

    /// Sends requests in one write, so the server reads them all before it answers any;
    /// returns their ids.
    pub async fn send_burst(&mut self, requests: Vec<(&str, Value)>) -> Vec<i64> {
        let mut bytes = String::new();
        let mut ids = Vec::new();
        for (method, params) in requests {
            let id = self.next_id;
            self.next_id += 1;
            let message = json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params});
            bytes.push_str(&self.framed(message));
            ids.push(id);
        }
        self.send_raw(bytes.as_bytes()).await;
        ids
    }

    pub async fn send_notification(&mut self, method: &str, params: Value) {
        self.send(json!({"jsonrpc": "2.0", "method": method, "params": params}))
            .await;
    }

    /// Answers a server-to-client request.
    pub async fn respond(&mut self, id: Value, result: Value) {
        self.send(json!({"jsonrpc": "2.0", "id": id, "result": result}))
            .await;
    }

    /// Reads one message from stdout (`None` at EOF).
    async fn read_message(&mut self) -> Option<Value> {
        let read = async {
            loop {
                if let Some(message) = self.take_message() {
                    return Some(message);
                }
                if !self.inbox.fill(&mut self.stdout).await {
                    return None;
                }
            }
        };
        let message: Option<Value> = tokio::time::timeout(READ_TIMEOUT, read)
            .await
            .expect("compactd answered in time");
        if let (Some(transcript), Some(message)) = (&mut self.transcript, &message) {
            transcript.push(Transcribed {
                from_client: false,
                message: message.clone(),
            });
        }
        message
    }

    /// The first whole message in the inbox, taken out of it.
    fn take_message(&mut self) -> Option<Value> {
        let (body, used) = match self.framing {
            Framing::Ndjson => {
                let n = self.inbox.line_len()?;
                (0..n - 1, n)
            }
            Framing::Lsp => {
                let unread = self.inbox.unread();
                let head = unread.windows(4).position(|w| w == b"\r\n\r\n")?;
                let headers = std::str::from_utf8(&unread[..head]).expect("ASCII headers");
                let length: usize = headers
                    .lines()
                    .find_map(|l| l.strip_prefix("Content-Length: "))
                    .expect("Content-Length header")
                    .parse()
                    .expect("a length");
                let from = head + 4;
                if unread.len() < from + length {
                    return None;
                }
                (from..from + length, from + length)
            }
        };
        let bytes = &self.inbox.take(used)[body];
        let message = serde_json::from_slice(bytes).unwrap_or_else(|e| {
            let text = String::from_utf8_lossy(bytes);
            panic!(
                "the server sends JSON: {e}: {:?}",
                &text[..text.len().min(300)]
            )
        });
        Some(message)
    }

    async fn next_message(&mut self) -> Value {
        self.read_message()
            .await
            .expect("compactd closed its output unexpectedly")
    }

    /// The next message, from the buffer or the wire; `None` at EOF.
    pub async fn receive(&mut self) -> Option<Value> {
        match self.buffer.pop_front() {
            Some(message) => Some(message),
            None => self.read_message().await,
        }
    }

    /// Reads until the response to `id`; everything else is buffered.
    pub async fn read_until_response(&mut self, id: i64) -> Value {
        if let Some(at) = self.buffer.iter().position(|m| is_response(m, id)) {
            return self.buffer.remove(at).unwrap();
        }
        loop {
            let message = self.next_message().await;
            if is_response(&message, id) {
                return message;
            }
            self.buffer.push_back(message);
        }
    }

    /// Sends a request and returns its `result`, or its `error` as `Err`.
    pub async fn request(&mut self, method: &str, params: Value) -> Result<Value, Value> {
        let id = self.send_request(method, params).await;
        self.response_result(id).await
    }

    /// Reads until the response to request `id` (sent before, perhaps by other means than
    /// [`Self::send_request`]); its `result`, or its `error` as `Err`.
    pub async fn response_result(&mut self, id: i64) -> Result<Value, Value> {
        let response = self.read_until_response(id).await;
        match response.get("error") {
            Some(error) => Err(error.clone()),
            None => Ok(response["result"].clone()),
        }
    }

    /// Like [`Self::request`], panicking on an error.
    pub async fn ok(&mut self, method: &str, params: Value) -> Value {
        self.request(method, params)
            .await
            .unwrap_or_else(|e| panic!("{method} failed: {e}"))
    }

    /// Like [`Self::request`], expecting an error of `kind`; returns the error.
    pub async fn err(&mut self, method: &str, params: Value, kind: &str) -> Value {
        let error = self
            .request(method, params)
            .await
            .expect_err(&format!("{method} should fail with {kind}"));
        assert_eq!(error["data"]["kind"], kind, "unexpected error: {error}");
        error
    }

    /// The next message with `method` that has no id (a notification), from the buffer or
    /// the wire; other messages stay buffered.
    pub async fn expect_notification(&mut self, method: &str) -> Value {
        self.expect(method, false).await
    }

    /// The next server-to-client request `method`: `(id, params)`.
    pub async fn expect_request(&mut self, method: &str) -> (Value, Value) {
        let message = self.expect(method, true).await;
        (message["id"].clone(), message["params"].clone())
    }

    async fn expect(&mut self, method: &str, request: bool) -> Value {
        let matches = |m: &Value| m["method"] == method && m.get("id").is_some() == request;
        if let Some(at) = self.buffer.iter().position(matches) {
            let message = self.buffer.remove(at).unwrap();
            return if request {
                message
            } else {
                message["params"].clone()
            };
        }
        loop {
            let message = self.next_message().await;
            if matches(&message) {
                return if request {
                    message
                } else {
                    message["params"].clone()
                };
            }
            self.buffer.push_back(message);
        }
    }

    /// Whether the response to `id` has arrived (and is buffered); reads nothing.
    pub fn has_response(&self, id: i64) -> bool {
        self.buffer.iter().any(|m| is_response(m, id))
    }

    /// Removes and returns every buffered notification of `method`.
    pub fn take_all(&mut self, method: &str) -> Vec<Value> {
        let (taken, kept): (Vec<Value>, Vec<Value>) = self
            .buffer
            .drain(..)
            .partition(|m| m["method"] == method && m.get("id").is_none());
        self.buffer = kept.into();
        taken.into_iter().map(|m| m["params"].clone()).collect()
    }

    /// Removes and returns every buffered response with a `null` id (parse errors).
    pub fn take_all_responses_without_id(&mut self) -> Vec<Value> {
        let (taken, kept): (Vec<Value>, Vec<Value>) = self
            .buffer
            .drain(..)
            .partition(|m| m.get("method").is_none() && m["id"].is_null());
        self.buffer = kept.into();
        taken
    }

    /// `initialize` with `capabilities` (and `initializationOptions`), then `initialized`.
    pub async fn initialize(&mut self, capabilities: Value, options: Value) -> Value {
        let result = self
            .ok(
                "initialize",
                json!({"processId": std::process::id(), "clientInfo": {"name": "test"},
                       "capabilities": capabilities, "initializationOptions": options}),
            )
            .await;
        self.send_notification("initialized", json!({})).await;
        result
    }

    /// Initializes with no capabilities and creates a session in the project dir.
    pub async fn start_session(&mut self) -> String {
        self.initialize(json!({}), json!({})).await;
        self.create_session().await
    }

    pub async fn create_session(&mut self) -> String {
        let cwd = self.project();
        let info = self.ok("session/create", json!({"cwd": cwd})).await;
        info["sessionId"].as_str().unwrap().to_owned()
    }

    /// Appends entries waiting for any auto-compaction (`waitForCompaction: true`); drops the
    /// `session/entriesAppended` notifications they cause.
    pub async fn append(&mut self, session: &str, entries: Value) -> Value {
        let result = self
            .ok(
                "session/append",
                json!({"sessionId": session, "entries": entries, "waitForCompaction": true}),
            )
            .await;
        self.take_all("session/entriesAppended");
        result
    }

    /// Fails unless every message the server sent so far was consumed.
    pub fn assert_no_unread_messages(&self) {
        let unread: Vec<&Value> = self
            .buffer
            .iter()
            .filter(|m| !(self.ignore_external_appends && is_external_append(m)))
            .collect();
        assert!(
            unread.is_empty(),
            "unconsumed messages from compactd: {unread:#?}"
        );
    }

    /// For a daemon that shares sessions with other daemons on one database: the
    /// `session/entriesAppended` notifications of their appends (`external: true`), which
    /// arrive whenever the database announces them, need not be consumed.
    pub fn ignore_external_appends(&mut self, ignore: bool) {
        self.ignore_external_appends = ignore;
    }

    /// `shutdown`, `exit`, then reads to EOF: nothing may be left unread, and the exit code
    /// is 0.
    pub async fn finish(mut self) {
        let id = self.send_request("shutdown", json!(null)).await;
        let response = self.read_until_response(id).await;
        assert_eq!(response["result"], Value::Null, "{response}");
        self.send_notification("exit", json!(null)).await;
        while let Some(message) = self.read_message().await {
            self.buffer.push_back(message);
        }
        self.assert_no_unread_messages();
        let status = tokio::time::timeout(READ_TIMEOUT, self.child.wait())
            .await
            .expect("compactd exits")
            .expect("wait for compactd");
        assert_eq!(status.code(), Some(0));
    }

    /// Closes stdin and waits for the process to exit; returns its exit code.
    pub async fn close_stdin_and_wait(mut self) -> Option<i32> {
        drop(self.stdin.take());
        while let Some(message) = self.read_message().await {
            self.buffer.push_back(message);
        }
        self.assert_no_unread_messages();
        tokio::time::timeout(READ_TIMEOUT, self.child.wait())
            .await
            .expect("compactd exits")
            .expect("wait")
            .code()
    }
}

/// With `COMPACTD_TEST_BACKEND=postgres`, every daemon stores its sessions in a fresh
/// database of the shared test server (`storage.backend`, `DATABASE_URL`), so a suite written
/// for files runs unchanged on PostgreSQL.
fn on_test_backend(
    settings: Option<Value>,
    mut env: Vec<(String, String)>,
) -> (Option<Value>, Vec<(String, String)>) {
    match std::env::var("COMPACTD_TEST_BACKEND").as_deref() {
        Ok("postgres") => {}
        Ok("file") | Err(_) => return (settings, env),
        Ok(other) => panic!("COMPACTD_TEST_BACKEND={other}: expected file or postgres"),
    }
    let mut settings = settings.unwrap_or_else(|| json!({}));
    settings
        .as_object_mut()
        .expect("settings are an object")
        .entry("storage")
        .or_insert_with(|| json!({}))
        .as_object_mut()
        .expect("storage is an object")
        .insert("backend".into(), json!("postgres"));
    if !env.iter().any(|(k, _)| k == "DATABASE_URL") {
        env.push((
            "DATABASE_URL".into(),
            crate::postgres::shared().create_database(),
        ));
    }
    (Some(settings), env)
}

fn is_external_append(message: &Value) -> bool {
    message["method"] == "session/entriesAppended" && message["params"]["external"] == true
}

fn is_response(message: &Value, id: i64) -> bool {
    message["id"] == id && message.get("method").is_none()
}

/// A user message entry for `session/append`.
pub fn user(text: &str) -> Value {
    json!({"type": "message", "message": {"role": "user", "content": text, "timestamp": 1767225600000_i64}})
}

/// An assistant message entry with `usage` (context tokens) and `stopReason`.
pub fn assistant(text: &str, context_tokens: u64) -> Value {
    json!({"type": "message", "message": {
        "role": "assistant", "content": [{"type": "text", "text": text}],
        "provider": "anthropic", "model": "claude-sonnet-4-5",
        "usage": {"input": context_tokens, "output": 10, "cacheRead": 0, "cacheWrite": 0,
                  "totalTokens": context_tokens + 10},
        "stopReason": "stop", "timestamp": now_ms()}})
}

/// A context-overflow error reply.
pub fn overflow_reply() -> Value {
    json!({"type": "message", "message": {
        "role": "assistant", "content": [],
        "provider": "anthropic", "model": "claude-sonnet-4-5",
        "usage": {"input": 0, "output": 0, "cacheRead": 0, "cacheWrite": 0, "totalTokens": 0},
        "stopReason": "error", "errorMessage": "prompt is too long: 213004 tokens > 200000 maximum",
        "timestamp": now_ms()}})
}

pub fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64
}

/// A conversation of `turns` user/assistant pairs with some bulk, for compaction.
pub fn conversation(turns: usize, words: usize) -> Value {
    let bulk = "lorem ipsum dolor sit amet ".repeat(words);
    let mut entries = Vec::new();
    for i in 0..turns {
        entries.push(user(&format!(
            "Step {i}: please edit src/file{i}.rs. {bulk}"
        )));
        entries.push(assistant(&format!("Done with step {i}. {bulk}"), 1000));
    }
    Value::Array(entries)
}

/// The entries of a session file (header excluded).
pub fn file_entries(path: &Path) -> Vec<Value> {
    entries_of(&std::fs::read(path).unwrap())
}

/// The entries of a session's JSONL (after the header line; blank lines skipped).
fn entries_of(jsonl: &[u8]) -> Vec<Value> {
    std::str::from_utf8(jsonl)
        .expect("UTF-8 JSONL")
        .lines()
        .skip(1)
        .filter(|l| !l.trim().is_empty())
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}
