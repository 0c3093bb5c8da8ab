//! One `tenantry serve` process slot: a fixed loopback port, the `TENANTRY_*` environment, and
//! the process of the current generation (restarted after a kill or a graceful stop). Each
//! generation logs (JSON) to its own file in the run folder.
//!
//! With libfaketime (the wall-clock step fault), every generation preloads it with its own
//! timestamp file (`replica-<i>.faketime`, an offset such as `+0` or `-600`): the harness steps
//! the process's wall clock by rewriting the file, re-read within two seconds
//! (`FAKETIME_CACHE_DURATION=1`; a file read on every clock call would cost a read per
//! `clock_gettime`); `DONT_FAKE_MONOTONIC=1` leaves the monotonic clock alone, so
//! only the wall clock steps, as a host's would under a bad NTP correction. A restarted
//! generation starts with the slot's current offset, like a process on a host whose clock is off.
//!
//! Signals other than SIGKILL are sent with `kill -s` (the workspace denies `unsafe`, so no
//! libc call).

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use tokio::process::{Child, Command};
use tokio::time::Instant;

/// A replica slot.
#[derive(Debug)]
pub struct Replica {
    /// Index (0-based).
    pub index: usize,
    /// Admin API port (the same for every generation).
    pub port: u16,
    bin: PathBuf,
    env: Vec<(String, String)>,
    dir: PathBuf,
    child: Option<Child>,
    pid: Option<u32>,
    /// Processes started so far.
    pub generation: u32,
    /// Log files, one per generation.
    pub logs: Vec<PathBuf>,
    /// libfaketime's timestamp file of the slot, when the library is preloaded.
    clock_file: Option<PathBuf>,
}

impl Replica {
    /// A slot that runs `bin serve` in `dir` with `env` and `TENANTRY_LISTEN=127.0.0.1:port`.
    pub fn new(
        index: usize,
        port: u16,
        bin: &Path,
        env: Vec<(String, String)>,
        dir: &Path,
    ) -> Self {
        Self {
            index,
            port,
            // The process runs in the run folder: a relative path must not change meaning.
            bin: std::path::absolute(bin).unwrap_or_else(|_| bin.to_path_buf()),
            env,
            dir: dir.to_path_buf(),
            child: None,
            pid: None,
            generation: 0,
            logs: Vec::new(),
            clock_file: None,
        }
    }

    /// Preloads `lib` (libfaketime) into every generation, with the slot's timestamp file in the
    /// run folder, at offset 0 (written now).
    ///
    /// # Errors
    /// The timestamp file cannot be written.
    pub fn with_faketime(mut self, lib: &Path) -> Result<Self, String> {
        let file = self.dir.join(format!("replica-{}.faketime", self.index));
        self.env.extend(
            [
                ("LD_PRELOAD", lib.display().to_string()),
                ("FAKETIME_TIMESTAMP_FILE", file.display().to_string()),
                ("FAKETIME_CACHE_DURATION", "1".to_owned()),
                ("DONT_FAKE_MONOTONIC", "1".to_owned()),
            ]
            .map(|(k, v)| (k.to_owned(), v)),
        );
        self.clock_file = Some(file);
        self.set_clock_offset(0)?;
        Ok(self)
    }

    /// The wall clock a process with the slot's libfaketime environment reads, minus the
    /// harness's, in whole seconds: `date +%s` run with the same preload and timestamp file
    /// (the replica's own HTTP `Date` header cannot show a backward step: hyper refreshes its
    /// cached date only once the clock passes the next second it expected).
    ///
    /// # Errors
    /// No libfaketime preloaded, or `date` did not run.
    pub async fn observed_clock_offset(&self) -> Result<i64, String> {
        if self.clock_file.is_none() {
            return Err("libfaketime is not preloaded".to_owned());
        }
        let faketime = self.env.iter().filter(|(k, _)| {
            k == "LD_PRELOAD" || k.starts_with("FAKETIME") || k == "DONT_FAKE_MONOTONIC"
        });
        let out = Command::new("date")
            .arg("+%s")
            .envs(faketime.map(|(k, v)| (k.as_str(), v.as_str())))
            .stdin(Stdio::null())
            .output()
            .await
            .map_err(|e| format!("cannot run date: {e}"))?;
        let now = chrono::Utc::now().timestamp();
        let text = String::from_utf8_lossy(&out.stdout);
        let seen: i64 = text
            .trim()
            .parse()
            .map_err(|_| format!("date printed {text:?}"))?;
        Ok(seen - now)
    }

    /// Steps the wall clock of the running process (and of later generations) to `seconds`
    /// off the real time; takes effect within a second. The file is replaced whole (written
    /// aside, then renamed), so libfaketime never reads half of it. The process re-reads it
    /// when its cache of one second has run out: within two seconds (libfaketime compares whole
    /// seconds).
    ///
    /// # Errors
    /// No libfaketime preloaded, or the file cannot be written.
    pub fn set_clock_offset(&self, seconds: i64) -> Result<(), String> {
        let file = self
            .clock_file
            .as_ref()
            .ok_or("libfaketime is not preloaded")?;
        let aside = file.with_extension("faketime.new");
        std::fs::write(&aside, format!("{seconds:+}\n"))
            .and_then(|()| std::fs::rename(&aside, file))
            .map_err(|e| format!("cannot write {}: {e}", file.display()))
    }

    /// Admin API base URL.
    pub fn base(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// The process id of the running generation.
    pub fn pid(&self) -> Option<u32> {
        self.pid
    }

    /// Whether a process is running.
    pub fn running(&self) -> bool {
        self.child.is_some()
    }

    /// Starts the next generation. Inherited `TENANTRY_*` (and libfaketime's) variables are
    /// removed, so only the harness's settings apply; the working folder is the run folder (no `tenantry.toml`).
    pub fn spawn(&mut self) -> Result<(), String> {
        self.generation += 1;
        let log = self.dir.join(format!(
            "replica-{}-gen-{}.log",
            self.index, self.generation
        ));
        let file = std::fs::File::create(&log)
            .map_err(|e| format!("cannot create {}: {e}", log.display()))?;
        let err = file
            .try_clone()
            .map_err(|e| format!("cannot share {}: {e}", log.display()))?;
        let mut cmd = Command::new(&self.bin);
        cmd.arg("serve").current_dir(&self.dir);
        for (name, _) in std::env::vars() {
            if name.starts_with("TENANTRY_")
                || name.starts_with("FAKETIME")
                || name == "LD_PRELOAD"
                || name == "DONT_FAKE_MONOTONIC"
            {
                cmd.env_remove(name);
            }
        }
        cmd.envs(self.env.iter().map(|(k, v)| (k.as_str(), v.as_str())))
            .env("TENANTRY_LISTEN", format!("127.0.0.1:{}", self.port))
            .stdin(Stdio::null())
            .stdout(file)
            .stderr(err)
            .kill_on_drop(true);
        let child = cmd
            .spawn()
            .map_err(|e| format!("cannot start {}: {e}", self.bin.display()))?;
        self.pid = child.id();
        self.child = Some(child);
        self.logs.push(log);
        Ok(())
    }

    /// SIGKILL and reap.
    pub async fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill().await;
        }
        self.pid = None;
    }

    /// SIGTERM, then waits up to `grace` for the exit (SIGKILL after that); returns whether it
    /// exited by itself, and its status.
    pub async fn terminate(&mut self, grace: Duration) -> (bool, String) {
        let Some(mut child) = self.child.take() else {
            return (true, "not running".to_owned());
        };
        if let Some(pid) = self.pid.take() {
            let _ = signal(pid, "TERM").await;
        }
        match tokio::time::timeout(grace, child.wait()).await {
            Ok(Ok(status)) => (true, status.to_string()),
            Ok(Err(e)) => (false, e.to_string()),
            Err(_) => {
                let _ = child.kill().await;
                (false, format!("still running after {grace:?}; killed"))
            }
        }
    }

    /// SIGSTOP.
    pub async fn stop(&self) -> Result<(), String> {
        match self.pid {
            Some(pid) => signal(pid, "STOP").await,
            None => Err("not running".to_owned()),
        }
    }

    /// SIGCONT.
    pub async fn resume(&self) -> Result<(), String> {
        match self.pid {
            Some(pid) => signal(pid, "CONT").await,
            None => Err("not running".to_owned()),
        }
    }

    /// Whether the process exited by itself (a crash); reaps it.
    pub fn exited(&mut self) -> Option<String> {
        let child = self.child.as_mut()?;
        match child.try_wait() {
            Ok(Some(status)) => {
                self.child = None;
                self.pid = None;
                Some(status.to_string())
            }
            _ => None,
        }
    }

    /// Waits until `path` (e.g. `/readyz`) answers 200, up to `limit`.
    pub async fn wait_for(&mut self, path: &str, limit: Duration) -> Result<(), String> {
        let deadline = Instant::now() + limit;
        loop {
            if let Some(status) = self.exited() {
                return Err(format!(
                    "replica {} exited ({status}); see {}",
                    self.index,
                    self.logs
                        .last()
                        .map(|l| l.display().to_string())
                        .unwrap_or_default()
                ));
            }
            let last = match probe(self.port, path).await {
                Ok(200) => return Ok(()),
                Ok(status) => format!("answered {status}"),
                Err(e) => e,
            };
            if Instant::now() >= deadline {
                return Err(format!(
                    "replica {} {path}: {last} after {limit:?}",
                    self.index
                ));
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}

/// `kill -s SIG pid`.
async fn signal(pid: u32, sig: &str) -> Result<(), String> {
    let status = Command::new("kill")
        .args(["-s", sig, &pid.to_string()])
        .stdin(Stdio::null())
        .status()
        .await
        .map_err(|e| format!("cannot run kill: {e}"))?;
    if status.success() {
        Ok(())
    } else {
        Err(format!("kill -s {sig} {pid}: {status}"))
    }
}

/// The response head (status line and headers) of an unauthenticated GET of `path` on the
/// loopback `port` (probes need no token), and the harness's wall clock when it arrived.
///
/// # Errors
/// No complete head within 3 s, or the connection failed.
async fn get_head(
    port: u16,
    path: &str,
) -> Result<(String, chrono::DateTime<chrono::Utc>), String> {
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
    let exchange = async {
        let mut stream = tokio::net::TcpStream::connect(("127.0.0.1", port))
            .await
            .map_err(|e| e.to_string())?;
        let request =
            format!("GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n");
        stream
            .write_all(request.as_bytes())
            .await
            .map_err(|e| e.to_string())?;
        let mut head = Vec::new();
        let mut buf = [0u8; 1024];
        while !head.windows(4).any(|w| w == b"\r\n\r\n") && head.len() < 16 * 1024 {
            let n = stream.read(&mut buf).await.map_err(|e| e.to_string())?;
            if n == 0 {
                break;
            }
            head.extend_from_slice(&buf[..n]);
        }
        Ok::<_, String>((
            String::from_utf8_lossy(&head).into_owned(),
            chrono::Utc::now(),
        ))
    };
    tokio::time::timeout(Duration::from_secs(3), exchange)
        .await
        .map_err(|_| "no answer within 3 s".to_owned())?
}

/// The wall clock of the process on `port` minus the harness's, in whole seconds, from the
/// `Date` header of an unauthenticated GET of `path` (the HTTP server stamps every answer with
/// its process's wall clock, to the second).
///
/// # Errors
/// No answer within 3 s, or no parsable `Date` header.
pub async fn clock_offset(port: u16, path: &str) -> Result<i64, String> {
    let (head, now) = get_head(port, path).await?;
    let date = date_header(&head).ok_or_else(|| format!("no Date header in {head:?}"))?;
    Ok(date.timestamp() - now.timestamp())
}

/// The `Date` header of an HTTP response head (RFC 9110 IMF-fixdate).
fn date_header(head: &str) -> Option<chrono::DateTime<chrono::FixedOffset>> {
    head.lines().skip(1).find_map(|line| {
        let (name, value) = line.split_once(':')?;
        if !name.trim().eq_ignore_ascii_case("date") {
            return None;
        }
        chrono::DateTime::parse_from_rfc2822(value.trim()).ok()
    })
}

/// The status code of an HTTP response head's status line (`HTTP/1.1 200 OK`).
fn status_of(head: &str) -> Option<u16> {
    head.get(9..12).and_then(|s| s.parse().ok())
}

/// Status of an unauthenticated GET of `path` on the loopback `port` (probes need no token).
///
/// # Errors
/// No answer within 3 s, or an answer that is not HTTP.
pub async fn probe(port: u16, path: &str) -> Result<u16, String> {
    let (head, _) = get_head(port, path).await?;
    status_of(&head).ok_or_else(|| format!("not an HTTP answer: {head}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_the_status_code() {
        assert_eq!(
            status_of("HTTP/1.1 503 Service Unavailable\r\n\r\n"),
            Some(503)
        );
        assert_eq!(status_of("HTTP/1.1 200 OK\r\n"), Some(200));
        assert_eq!(status_of("garbage"), None);
        assert_eq!(status_of(""), None);
    }

    #[test]
    fn reads_the_date_header() {
        let head =
            "HTTP/1.1 200 OK\r\ncontent-length: 2\r\ndate: Tue, 01 Dec 2026 22:32:16 GMT\r\n\r\n";
        let date = date_header(head).map(|d| d.timestamp());
        assert_eq!(
            date,
            chrono::DateTime::parse_from_rfc3339("2026-12-01T22:32:16Z")
                .ok()
                .map(|d| d.timestamp())
        );
        assert_eq!(date_header("HTTP/1.1 200 OK\r\n\r\n"), None);
    }

    #[test]
    fn the_timestamp_file_holds_a_signed_offset() {
        let dir = std::env::temp_dir().join(format!("chaos-faketime-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap_or_default();
        let slot = Replica::new(2, 1, Path::new("tenantry"), Vec::new(), &dir);
        let Ok(slot) = slot.with_faketime(Path::new("/lib/libfaketime.so.1")) else {
            panic!("timestamp file not written");
        };
        let file = dir.join("replica-2.faketime");
        assert_eq!(std::fs::read_to_string(&file).ok().as_deref(), Some("+0\n"));
        assert!(slot.set_clock_offset(-600).is_ok());
        assert_eq!(
            std::fs::read_to_string(&file).ok().as_deref(),
            Some("-600\n")
        );
        assert!(
            slot.env
                .iter()
                .any(|(k, v)| k == "DONT_FAKE_MONOTONIC" && v == "1")
        );
        let _ = std::fs::remove_dir_all(&dir);
    }
}
