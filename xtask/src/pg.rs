//! Throwaway PostgreSQL clusters for the PostgreSQL run of the tests and for manual work.
//!
//! [`Cluster::start`] finds the server binaries (`pg_config --bindir` when that folder holds
//! `initdb`, else the highest Debian-style `/usr/lib/postgresql/<version>/bin`), runs `initdb`
//! into a new temporary folder, and starts a server tuned for tests (no fsync, 200 connections)
//! that listens on `127.0.0.1` at a free port only, with its Unix socket inside that folder.
//!
//! PostgreSQL refuses to run as root. When the effective user is root (as on CI), the folder is
//! handed to the `postgres` system user and `initdb` / `pg_ctl` run through
//! `runuser -u postgres --`.
//!
//! [`Cluster::start_tls`] starts a TLS-only variant: a CA and a server certificate for
//! `localhost` / `127.0.0.1` made here (rcgen; the key is mode 0600 and, when we are root,
//! owned by `postgres`, as the server demands), `ssl = on`, and a `pg_hba.conf` whose only TCP
//! lines are `hostssl` (a connection without TLS is refused by the server: "no pg_hba.conf
//! entry ... no encryption"). Its CA file is [`Cluster::ca_file`].
//!
//! Cleanup: a [`Cluster`] value owns the server. Dropping it (normal return, error return or
//! panic unwinding) stops the server with `pg_ctl stop -m immediate` and removes the folder.
//! Every live cluster is also listed in a process-wide registry so that the signal handler
//! ([`crate::interrupt`]) can tear it down on Ctrl-C / SIGTERM before exiting; whichever of the
//! two gets to a cluster first removes it from the registry, so teardown happens exactly once.

use std::fmt::Write as _;
use std::fs;
use std::io::Write as _;
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::{SystemTime, UNIX_EPOCH};

/// Why a throwaway cluster could not be started.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PgError {
    /// Neither `pg_config --bindir` nor `/usr/lib/postgresql/*/bin` holds `initdb`.
    #[error(
        "no PostgreSQL server binaries found (looked for initdb in `pg_config --bindir` and \
         /usr/lib/postgresql/*/bin). Install the PostgreSQL server (Debian/Ubuntu: \
         `apt-get install postgresql`), or point the tests at an existing server with \
         DATABASE_URL=postgres://user:password@host:port/db"
    )]
    NoServerBinaries,
    /// Running as root, but there is no `postgres` user to run the server as.
    #[error(
        "running as root, and PostgreSQL refuses to run as root, but there is no `postgres` \
         user to run it as. Create one (`useradd --system postgres`), run as a normal user, \
         or set DATABASE_URL to an existing server"
    )]
    NoPostgresUser,
    /// A program could not be started at all (not installed, not executable).
    #[error("could not run `{program}` to {what}: {reason}")]
    Spawn {
        /// What the program was meant to do.
        what: String,
        /// The program.
        program: String,
        /// The operating system's reason.
        reason: String,
    },
    /// A program ran and failed.
    #[error("failed to {what} ({status}):\n{output}")]
    Failed {
        /// What the program was meant to do.
        what: String,
        /// Its exit status.
        status: String,
        /// Its output, or the tail of the server log.
        output: String,
    },
    /// A file-system operation on the cluster folder failed.
    #[error("failed to {what}: {reason}")]
    Io {
        /// What was attempted.
        what: String,
        /// The operating system's reason.
        reason: String,
    },
    /// The certificates of a TLS cluster could not be made.
    #[error("failed to make the TLS certificates of the cluster: {0}")]
    Certificates(String),
}

/// A running throwaway cluster; dropping it stops the server and removes its folder.
#[derive(Debug)]
pub struct Cluster {
    dir: PathBuf,
    port: u16,
    version: String,
    bin: PathBuf,
    as_postgres: bool,
    tls: bool,
}

impl Cluster {
    /// Initializes and starts a new cluster, waiting until it accepts connections.
    ///
    /// # Errors
    /// [`PgError::NoServerBinaries`] when no server binaries are installed,
    /// [`PgError::NoPostgresUser`] when running as root without a `postgres` user, and
    /// [`PgError::Failed`] / [`PgError::Spawn`] / [`PgError::Io`] when a step fails (the message
    /// carries the tool's output or the server log). Anything created so far is removed.
    pub fn start() -> Result<Cluster, PgError> {
        Self::start_with(false)
    }

    /// [`Cluster::start`] for the TLS-only variant (see the module docs): TCP connections
    /// without TLS are refused; the server's certificate is signed by [`Cluster::ca_file`].
    ///
    /// # Errors
    /// As [`Cluster::start`], and [`PgError::Certificates`] when rcgen fails.
    pub fn start_tls() -> Result<Cluster, PgError> {
        Self::start_with(true)
    }

    fn start_with(tls: bool) -> Result<Cluster, PgError> {
        let bin = find_server_bindir().ok_or(PgError::NoServerBinaries)?;
        let as_postgres = effective_uid_is_root();
        if as_postgres && !postgres_user_exists() {
            return Err(PgError::NoPostgresUser);
        }
        let version = server_version(&bin);
        let dir = create_temp_dir(as_postgres)?;
        // From here on the cluster is registered, so both Drop and the signal handler clean up.
        live().push(Instance {
            dir: dir.clone(),
            bin: bin.clone(),
            as_postgres,
        });
        let mut cluster = Cluster {
            dir,
            port: 0,
            version,
            bin: bin.clone(),
            as_postgres,
            tls,
        };
        let instance = Instance {
            dir: cluster.dir.clone(),
            bin,
            as_postgres,
        };
        if as_postgres {
            let mut chown = Command::new("chown");
            chown.arg("postgres").arg(&cluster.dir);
            run(chown, "hand the cluster folder to the postgres user")?;
        }
        instance.initdb()?;
        instance.write_config()?;
        if tls {
            instance.write_tls()?;
        }
        cluster.port = instance.start_server()?;
        instance.wait_ready(cluster.port)?;
        Ok(cluster)
    }

    /// The URL of the `postgres` database as superuser `postgres` (trust authentication).
    pub fn url(&self) -> String {
        format!("postgres://postgres@127.0.0.1:{}/postgres", self.port)
    }

    /// The CA file that signed the server's certificate (PEM), for `sslrootcert`; `None`
    /// unless started with [`Cluster::start_tls`].
    pub fn ca_file(&self) -> Option<PathBuf> {
        self.tls.then(|| self.dir.join(CA_FILE))
    }

    /// [`Cluster::url`] with `sslmode=verify-full&sslrootcert=<CA file>` for a TLS cluster.
    pub fn verified_url(&self) -> String {
        match self.ca_file() {
            Some(ca) => format!(
                "{}?sslmode=verify-full&sslrootcert={}",
                self.url(),
                ca.display()
            ),
            None => self.url(),
        }
    }

    /// The temporary folder holding the data directory, the socket and `server.log`.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The folder of the server binaries (`pg_ctl`, `psql`).
    pub fn bindir(&self) -> &Path {
        &self.bin
    }

    /// Whether the server runs as the `postgres` user (through `runuser`, because we are root).
    pub fn runs_as_postgres(&self) -> bool {
        self.as_postgres
    }

    /// The server's version line, e.g. `postgres (PostgreSQL) 15.8`.
    pub fn version(&self) -> &str {
        &self.version
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        let mut live = live();
        if let Some(position) = live.iter().position(|i| i.dir == self.dir) {
            let instance = live.swap_remove(position);
            // The registry stays locked during teardown, so the signal handler cannot exit the
            // process halfway through it.
            instance.teardown();
        }
    }
}

/// Stops and removes every live cluster; used by the signal handler before it exits.
pub fn teardown_all() {
    let mut live = live();
    for instance in live.drain(..) {
        instance.teardown();
    }
}

/// The folder holding the server binaries (`initdb`, `pg_ctl`, `postgres`), if any.
///
/// `pg_config --bindir` wins when it holds `initdb` (on Debian it may point at a client-only
/// folder); otherwise the highest version under `/usr/lib/postgresql` that holds `initdb`.
pub fn find_server_bindir() -> Option<PathBuf> {
    if let Ok(out) = Command::new("pg_config")
        .arg("--bindir")
        .stdin(Stdio::null())
        .stderr(Stdio::null())
        .output()
        && out.status.success()
    {
        let dir = PathBuf::from(String::from_utf8_lossy(&out.stdout).trim());
        if has_server_binaries(&dir) {
            return Some(dir);
        }
    }
    let entries = fs::read_dir("/usr/lib/postgresql").ok()?;
    let mut versions: Vec<(Vec<u32>, PathBuf)> = entries
        .filter_map(Result::ok)
        .filter_map(|entry| {
            let version = parse_version(&entry.file_name().to_string_lossy())?;
            Some((version, entry.path().join("bin")))
        })
        .filter(|(_, bin)| has_server_binaries(bin))
        .collect();
    versions.sort();
    versions.pop().map(|(_, bin)| bin)
}

fn has_server_binaries(dir: &Path) -> bool {
    ["initdb", "pg_ctl", "postgres"]
        .iter()
        .all(|tool| dir.join(tool).is_file())
}

/// Parses a Debian version folder name (`15`, `9.6`) into comparable numbers.
fn parse_version(name: &str) -> Option<Vec<u32>> {
    name.split('.').map(|part| part.parse().ok()).collect()
}

/// One registered cluster: what teardown needs.
#[derive(Debug)]
struct Instance {
    dir: PathBuf,
    bin: PathBuf,
    as_postgres: bool,
}

static LIVE: Mutex<Vec<Instance>> = Mutex::new(Vec::new());

fn live() -> MutexGuard<'static, Vec<Instance>> {
    LIVE.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Attempts at finding a free port (another process may take the one we picked).
const START_ATTEMPTS: usize = 3;

impl Instance {
    fn data(&self) -> PathBuf {
        self.dir.join("data")
    }

    fn log(&self) -> PathBuf {
        self.dir.join("server.log")
    }

    /// A command for a server tool, run as `postgres` when we are root.
    fn tool(&self, name: &str) -> Command {
        let program = self.bin.join(name);
        let mut cmd = if self.as_postgres {
            let mut cmd = Command::new(runuser_program());
            cmd.args(["-u", "postgres", "--"]).arg(program);
            cmd
        } else {
            Command::new(program)
        };
        // The postgres user may not be allowed into our working directory.
        cmd.current_dir(&self.dir);
        cmd
    }

    fn initdb(&self) -> Result<(), PgError> {
        let help = Command::new(self.bin.join("initdb"))
            .arg("--help")
            .stdin(Stdio::null())
            .output()
            .map(|out| String::from_utf8_lossy(&out.stdout).into_owned())
            .unwrap_or_default();
        let mut cmd = self.tool("initdb");
        cmd.arg("-D").arg(self.data()).args([
            "-A",
            "trust",
            "-U",
            "postgres",
            "-E",
            "UTF8",
            "--locale=C",
        ]);
        if help.contains("--no-sync") {
            cmd.arg("--no-sync");
        }
        if help.contains("--no-instructions") {
            cmd.arg("--no-instructions");
        }
        run(cmd, "initialize the cluster (initdb)").map(drop)
    }

    /// Appends the test-server settings to `postgresql.conf` (later lines win).
    fn write_config(&self) -> Result<(), PgError> {
        let path = self.data().join("postgresql.conf");
        let settings = test_settings(&self.dir);
        fs::OpenOptions::new()
            .append(true)
            .open(&path)
            .and_then(|mut file| file.write_all(settings.as_bytes()))
            .map_err(|e| PgError::Io {
                what: format!("write {}", path.display()),
                reason: e.to_string(),
            })
    }

    /// Makes the CA and the server certificate, writes them into the cluster folder (the key
    /// mode 0600, everything owned by `postgres` when we are root), turns `ssl` on and leaves
    /// only `hostssl` lines for TCP in `pg_hba.conf`.
    fn write_tls(&self) -> Result<(), PgError> {
        let made = make_certificates().map_err(|e| PgError::Certificates(e.to_string()))?;
        let files = [
            (CA_FILE, made.ca, 0o644),
            (SERVER_CERT_FILE, made.cert, 0o644),
            (SERVER_KEY_FILE, made.key, 0o600),
        ];
        for (name, pem, mode) in &files {
            let path = self.dir.join(name);
            write_file(&path, pem, *mode)?;
            if self.as_postgres {
                let mut chown = Command::new("chown");
                chown.arg("postgres").arg(&path);
                run(chown, &format!("hand {name} to the postgres user"))?;
            }
        }
        let conf = self.data().join("postgresql.conf");
        fs::OpenOptions::new()
            .append(true)
            .open(&conf)
            .and_then(|mut file| file.write_all(tls_settings(&self.dir).as_bytes()))
            .map_err(|e| PgError::Io {
                what: format!("write {}", conf.display()),
                reason: e.to_string(),
            })?;
        let hba = self.data().join("pg_hba.conf");
        fs::write(&hba, TLS_ONLY_HBA).map_err(|e| PgError::Io {
            what: format!("write {}", hba.display()),
            reason: e.to_string(),
        })
    }

    /// Starts the server on a free port (retrying when the port was taken meanwhile).
    fn start_server(&self) -> Result<u16, PgError> {
        let mut attempt = 1;
        loop {
            let port = free_port()?;
            let mut cmd = self.tool("pg_ctl");
            cmd.arg("-D")
                .arg(self.data())
                .arg("-l")
                .arg(self.log())
                .args(["-w", "-t", "60", "-o"])
                .arg(format!("-p {port}"))
                .arg("start");
            match run(cmd, "start the server (pg_ctl start)") {
                Ok(_) => return Ok(port),
                Err(PgError::Failed { what, status, .. }) => {
                    let log = fs::read_to_string(self.log()).unwrap_or_default();
                    if log.contains("Address already in use") && attempt < START_ATTEMPTS {
                        attempt += 1;
                        continue;
                    }
                    return Err(PgError::Failed {
                        what,
                        status,
                        output: format!("server log {}:\n{}", self.log().display(), tail(&log, 30)),
                    });
                }
                Err(other) => return Err(other),
            }
        }
    }

    /// Checks over TCP that the server accepts connections (pg_ctl -w already waited).
    fn wait_ready(&self, port: u16) -> Result<(), PgError> {
        let pg_isready = self.bin.join("pg_isready");
        if !pg_isready.is_file() {
            return Ok(());
        }
        let mut cmd = Command::new(pg_isready);
        cmd.args(["-h", "127.0.0.1", "-t", "30", "-p"])
            .arg(port.to_string());
        run(cmd, "reach the server on 127.0.0.1 (pg_isready)").map(drop)
    }

    /// Stops the server (immediate mode) and removes the folder; problems are reported, not
    /// raised, since this runs in Drop and in the signal handler.
    fn teardown(&self) {
        if self.data().join("postmaster.pid").exists() {
            let mut cmd = self.tool("pg_ctl");
            cmd.arg("-D")
                .arg(self.data())
                .args(["-m", "immediate", "-w", "-t", "30", "stop"]);
            if let Err(e) = run(cmd, "stop the server (pg_ctl stop)") {
                eprintln!("xtask: warning: {e}");
                self.kill_postmaster();
            }
        }
        if let Err(e) = fs::remove_dir_all(&self.dir)
            && e.kind() != std::io::ErrorKind::NotFound
        {
            eprintln!(
                "xtask: warning: could not remove {}: {e}",
                self.dir.display()
            );
        }
    }

    /// Last resort when `pg_ctl stop` failed: SIGKILL the postmaster named in postmaster.pid.
    fn kill_postmaster(&self) {
        let Ok(pidfile) = fs::read_to_string(self.data().join("postmaster.pid")) else {
            return;
        };
        if let Some(pid) = pidfile
            .lines()
            .next()
            .and_then(|l| l.trim().parse::<u32>().ok())
        {
            let _ = Command::new("kill")
                .args(["-KILL", &pid.to_string()])
                .stdin(Stdio::null())
                .status();
        }
    }
}

/// The `postgresql.conf` lines for a throwaway test server whose socket lives in `socket_dir`.
fn test_settings(socket_dir: &Path) -> String {
    let socket_dir = socket_dir.display().to_string().replace('\'', "''");
    let mut s = String::from("\n# tenantry throwaway test cluster (cargo xtask)\n");
    for line in [
        "listen_addresses = '127.0.0.1'".to_owned(),
        format!("unix_socket_directories = '{socket_dir}'"),
        "max_connections = 200".to_owned(),
        "fsync = off".to_owned(),
        "synchronous_commit = off".to_owned(),
        "full_page_writes = off".to_owned(),
    ] {
        let _ = writeln!(s, "{line}");
    }
    s
}

/// The CA certificate of a TLS cluster, in its folder (PEM).
const CA_FILE: &str = "ca.crt";
/// The server's certificate (PEM), for `localhost` and `127.0.0.1`.
const SERVER_CERT_FILE: &str = "server.crt";
/// The server's private key (PEM, mode 0600).
const SERVER_KEY_FILE: &str = "server.key";

/// The `pg_hba.conf` of a TLS cluster: the Unix socket for the tools, and over TCP nothing
/// but TLS (no `host` line, so a connection without TLS finds no entry and is refused).
const TLS_ONLY_HBA: &str = "\
# tenantry TLS-only throwaway cluster (cargo xtask pg --tls): TCP only over TLS
local   all all              trust
hostssl all all 127.0.0.1/32 trust
hostssl all all ::1/128      trust
";

/// The `postgresql.conf` lines that turn TLS on with the certificate in `dir`.
fn tls_settings(dir: &Path) -> String {
    let path = |name: &str| dir.join(name).display().to_string().replace('\'', "''");
    format!(
        "\n# tenantry TLS-only throwaway cluster\nssl = on\nssl_cert_file = '{}'\nssl_key_file = '{}'\n",
        path(SERVER_CERT_FILE),
        path(SERVER_KEY_FILE)
    )
}

/// A CA and a server certificate it signed, PEM.
struct Certificates {
    ca: String,
    cert: String,
    key: String,
}

/// Makes a CA (`tenantry throwaway test CA`) and a server certificate for `localhost` and
/// `127.0.0.1` signed by it (rcgen, ECDSA P-256).
fn make_certificates() -> Result<Certificates, rcgen::Error> {
    use rcgen::{
        BasicConstraints, CertificateParams, CertifiedIssuer, DnType, ExtendedKeyUsagePurpose,
        IsCa, KeyPair, KeyUsagePurpose,
    };
    let mut ca_params = CertificateParams::new(Vec::<String>::new())?;
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca_params
        .distinguished_name
        .push(DnType::CommonName, "tenantry throwaway test CA");
    ca_params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
    let ca = CertifiedIssuer::self_signed(ca_params, KeyPair::generate()?)?;
    let mut leaf = CertificateParams::new(vec!["localhost".to_owned(), "127.0.0.1".to_owned()])?;
    leaf.distinguished_name
        .push(DnType::CommonName, "localhost");
    leaf.key_usages = vec![KeyUsagePurpose::DigitalSignature];
    leaf.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
    let key = KeyPair::generate()?;
    let cert = leaf.signed_by(&key, &ca)?;
    Ok(Certificates {
        ca: ca.pem(),
        cert: cert.pem(),
        key: key.serialize_pem(),
    })
}

/// Writes `contents` to a new file `path` with permission `mode`.
fn write_file(path: &Path, contents: &str, mode: u32) -> Result<(), PgError> {
    use std::os::unix::fs::OpenOptionsExt as _;
    fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(mode)
        .open(path)
        .and_then(|mut file| file.write_all(contents.as_bytes()))
        .map_err(|e| PgError::Io {
            what: format!("write {}", path.display()),
            reason: e.to_string(),
        })
}

/// Runs `cmd` to completion with its output captured; fails with that output.
fn run(mut cmd: Command, what: &str) -> Result<String, PgError> {
    let program = format!("{:?}", cmd.get_program());
    let out = cmd
        .stdin(Stdio::null())
        .output()
        .map_err(|e| PgError::Spawn {
            what: what.to_owned(),
            program: program.trim_matches('"').to_owned(),
            reason: e.to_string(),
        })?;
    let mut output = String::from_utf8_lossy(&out.stdout).into_owned();
    output.push_str(&String::from_utf8_lossy(&out.stderr));
    if out.status.success() {
        Ok(output)
    } else {
        Err(PgError::Failed {
            what: what.to_owned(),
            status: out.status.to_string(),
            output,
        })
    }
}

/// The last `lines` lines of `text`.
pub(crate) fn tail(text: &str, lines: usize) -> String {
    let all: Vec<&str> = text.lines().collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}

pub(crate) fn free_port() -> Result<u16, PgError> {
    TcpListener::bind(("127.0.0.1", 0))
        .and_then(|listener| listener.local_addr())
        .map(|addr| addr.port())
        .map_err(|e| PgError::Io {
            what: "find a free port on 127.0.0.1".to_owned(),
            reason: e.to_string(),
        })
}

/// Creates `<tmp>/tenantry-pg-<pid>-<n>-<nanos>`, private to its owner.
///
/// For a server run as `postgres` the base is `/tmp`: root's `TMPDIR` may sit in a folder that
/// the `postgres` user cannot enter.
pub(crate) fn create_temp_dir(for_postgres_user: bool) -> Result<PathBuf, PgError> {
    static COUNTER: AtomicU32 = AtomicU32::new(0);
    let base = if for_postgres_user && Path::new("/tmp").is_dir() {
        PathBuf::from("/tmp")
    } else {
        std::env::temp_dir()
    };
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or_default();
    let name = format!(
        "tenantry-pg-{}-{}-{nanos:08x}",
        std::process::id(),
        COUNTER.fetch_add(1, Ordering::Relaxed)
    );
    let dir = base.join(name);
    let io_err = |e: std::io::Error| PgError::Io {
        what: format!("create {}", dir.display()),
        reason: e.to_string(),
    };
    fs::create_dir(&dir).map_err(io_err)?;
    {
        use std::os::unix::fs::PermissionsExt as _;
        fs::set_permissions(&dir, fs::Permissions::from_mode(0o700)).map_err(io_err)?;
    }
    Ok(dir)
}

/// Whether this process runs with effective uid 0 (from /proc, else `id -u`).
pub(crate) fn effective_uid_is_root() -> bool {
    if let Ok(status) = fs::read_to_string("/proc/self/status")
        && let Some(line) = status.lines().find(|l| l.starts_with("Uid:"))
    {
        // Uid: real effective saved filesystem
        return line.split_whitespace().nth(2) == Some("0");
    }
    Command::new("id")
        .arg("-u")
        .output()
        .map(|out| String::from_utf8_lossy(&out.stdout).trim() == "0")
        .unwrap_or(false)
}

/// `runuser` (util-linux) lives in an sbin folder that may be missing from `PATH`.
pub(crate) fn runuser_program() -> PathBuf {
    ["/usr/sbin/runuser", "/sbin/runuser", "/usr/bin/runuser"]
        .iter()
        .map(PathBuf::from)
        .find(|p| p.is_file())
        .unwrap_or_else(|| PathBuf::from("runuser"))
}

pub(crate) fn postgres_user_exists() -> bool {
    Command::new("id")
        .args(["-u", "postgres"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

fn server_version(bin: &Path) -> String {
    Command::new(bin.join("postgres"))
        .arg("--version")
        .stdin(Stdio::null())
        .output()
        .map(|out| String::from_utf8_lossy(&out.stdout).trim().to_owned())
        .unwrap_or_else(|_| "PostgreSQL (unknown version)".to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn debian_version_folders_order_numerically() {
        let mut versions: Vec<Vec<u32>> = ["9.6", "15", "10", "13"]
            .iter()
            .filter_map(|v| parse_version(v))
            .collect();
        versions.sort();
        assert_eq!(versions.last(), Some(&vec![15]));
        assert_eq!(parse_version("common"), None);
    }

    #[test]
    fn test_settings_listen_on_loopback_with_socket_in_folder() {
        let settings = test_settings(Path::new("/tmp/it's"));
        assert!(settings.contains("listen_addresses = '127.0.0.1'"));
        assert!(settings.contains("unix_socket_directories = '/tmp/it''s'"));
        assert!(settings.contains("max_connections = 200"));
        assert!(settings.contains("fsync = off"));
    }

    /// The TLS cluster's `pg_hba.conf` lets nothing through TCP without TLS.
    #[test]
    fn the_tls_cluster_accepts_tcp_only_over_tls() {
        let tcp: Vec<&str> = TLS_ONLY_HBA
            .lines()
            .filter(|l| !l.starts_with('#') && !l.starts_with("local"))
            .collect();
        assert_eq!(tcp.len(), 2);
        assert!(tcp.iter().all(|l| l.starts_with("hostssl ")), "{tcp:?}");
        let settings = tls_settings(Path::new("/tmp/c"));
        assert!(settings.contains("ssl = on"));
        assert!(settings.contains("ssl_key_file = '/tmp/c/server.key'"));
    }

    /// The server certificate names `localhost` and `127.0.0.1` and is signed by the CA.
    #[test]
    fn the_certificates_are_pem_for_localhost() {
        let made = make_certificates().expect("make certificates");
        assert!(made.ca.starts_with("-----BEGIN CERTIFICATE-----"));
        assert!(made.cert.starts_with("-----BEGIN CERTIFICATE-----"));
        assert!(made.key.starts_with("-----BEGIN PRIVATE KEY-----"));
        assert_ne!(made.ca, made.cert);
    }

    #[test]
    fn tail_keeps_last_lines() {
        assert_eq!(tail("a\nb\nc", 2), "b\nc");
        assert_eq!(tail("a", 5), "a");
    }

    /// Needs PostgreSQL server binaries: `cargo test -p xtask -- --ignored`.
    #[test]
    #[ignore = "starts a PostgreSQL server"]
    fn cluster_starts_and_is_removed_on_drop() {
        let cluster = Cluster::start().expect("start cluster");
        let dir = cluster.dir().to_path_buf();
        assert!(dir.join("data/postmaster.pid").exists());
        assert!(cluster.url().starts_with("postgres://postgres@127.0.0.1:"));
        drop(cluster);
        assert!(!dir.exists());
        assert!(live().is_empty());
    }

    /// Needs PostgreSQL server binaries: `cargo test -p xtask -- --ignored`. The key is
    /// private to its owner (the server refuses it otherwise).
    #[test]
    #[ignore = "starts a PostgreSQL server"]
    fn tls_cluster_starts_with_a_private_key() {
        use std::os::unix::fs::PermissionsExt as _;
        let cluster = Cluster::start_tls().expect("start TLS cluster");
        let ca = cluster.ca_file().expect("a CA file");
        assert!(
            fs::read_to_string(&ca)
                .unwrap()
                .contains("BEGIN CERTIFICATE")
        );
        let key = fs::metadata(cluster.dir().join(SERVER_KEY_FILE)).unwrap();
        assert_eq!(key.permissions().mode() & 0o777, 0o600);
        assert!(
            cluster
                .verified_url()
                .contains("sslmode=verify-full&sslrootcert=")
        );
    }
}
