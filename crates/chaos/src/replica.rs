//! One `tenantry serve` process slot: a fixed loopback port, the `TENANTRY_*` environment, and
//! the process of the current generation (restarted after a kill or a graceful stop). Each
//! generation logs (JSON) to its own file in the run folder.
//!
//! Signals other than SIGKILL are sent with `kill -s` (the workspace forbids `unsafe`, so no
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
        }
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

    /// Starts the next generation. Inherited `TENANTRY_*` variables are removed, so only the
    /// harness's settings apply; the working folder is the run folder (no `tenantry.toml`).
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
            if name.starts_with("TENANTRY_") {
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

/// Status of an unauthenticated GET of `path` on the loopback `port` (probes need no token).
pub async fn probe(port: u16, path: &str) -> Result<u16, String> {
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
        let mut head = [0u8; 12];
        stream
            .read_exact(&mut head)
            .await
            .map_err(|e| e.to_string())?;
        let text = String::from_utf8_lossy(&head);
        text.get(9..12)
            .and_then(|s| s.parse().ok())
            .ok_or_else(|| format!("not an HTTP answer: {text}"))
    };
    tokio::time::timeout(Duration::from_secs(3), exchange)
        .await
        .map_err(|_| "no answer within 3 s".to_owned())?
}
