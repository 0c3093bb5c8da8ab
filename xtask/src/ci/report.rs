//! Running a step's command (echoed, with libtest's results added up) and the closing
//! summary of what each step did.

use std::io::{BufRead as _, BufReader, Write as _};
use std::path::Path;
use std::process::{Command, ExitStatus, Stdio};
use std::time::Duration;

use super::steps::PACKAGING_STEPS;

/// Runs `cmd` with inherited stdout/stderr.
pub(super) fn run_inherit(cmd: &mut Command) -> std::io::Result<ExitStatus> {
    let mut child = cmd.spawn()?;
    let _tracked = crate::interrupt::track_child(child.id());
    child.wait()
}

/// Runs `cmd` with stdout and stderr merged into one pipe (so their order is kept), echoing
/// it line by line to our stdout and adding up libtest's `test result:` lines.
pub(super) fn run_counting_tests(
    cmd: &mut Command,
) -> std::io::Result<(ExitStatus, Option<TestCounts>)> {
    let (reader, writer) = std::io::pipe()?;
    cmd.stdout(writer.try_clone()?).stderr(writer);
    let mut child = cmd.spawn()?;
    // Our copies of the write end must go, or the reader never sees end of file.
    cmd.stdout(Stdio::null()).stderr(Stdio::null());
    let _tracked = crate::interrupt::track_child(child.id());
    let mut counts = TestCounts::default();
    let mut out = std::io::stdout();
    for line in BufReader::new(reader).split(b'\n') {
        let Ok(line) = line else { break };
        let _ = out.write_all(&line);
        let _ = out.write_all(b"\n");
        let _ = out.flush();
        counts.add_line(&String::from_utf8_lossy(&line));
    }
    let status = child.wait()?;
    Ok((status, Some(counts)))
}

/// Sums of libtest's `test result: ok. 3 passed; 0 failed; 1 ignored; ...` lines.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub(super) struct TestCounts {
    passed: u64,
    failed: u64,
    ignored: u64,
}

impl TestCounts {
    pub(super) fn add_line(&mut self, line: &str) {
        let Some(rest) = line.trim_start().strip_prefix("test result:") else {
            return;
        };
        let tokens: Vec<&str> = rest
            .split(|c: char| c == ';' || c.is_whitespace())
            .filter(|t| !t.is_empty())
            .collect();
        for pair in tokens.windows(2) {
            let Ok(n) = pair[0].parse::<u64>() else {
                continue;
            };
            match pair[1] {
                "passed" => self.passed += n,
                "failed" => self.failed += n,
                "ignored" => self.ignored += n,
                _ => {}
            }
        }
    }

    pub(super) fn add(&mut self, other: TestCounts) {
        self.passed += other.passed;
        self.failed += other.failed;
        self.ignored += other.ignored;
    }
}

impl std::fmt::Display for TestCounts {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} passed, {} failed", self.passed, self.failed)?;
        if self.ignored > 0 {
            write!(f, ", {} skipped", self.ignored)?;
        }
        Ok(())
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Outcome {
    Passed,
    Failed,
    Skipped,
}

/// One step's line of the summary.
#[derive(Debug)]
pub(super) struct Record {
    pub(super) step: String,
    pub(super) outcome: Outcome,
    pub(super) elapsed: Option<Duration>,
    pub(super) detail: String,
}

/// What each step did, for the closing summary.
#[derive(Debug, Default)]
pub(super) struct Report {
    pub(super) records: Vec<Record>,
    pub(super) tests: Option<TestCounts>,
}

impl Report {
    pub(super) fn push(
        &mut self,
        step: &str,
        outcome: Outcome,
        elapsed: Option<Duration>,
        detail: String,
    ) {
        self.records.push(Record {
            step: step.to_owned(),
            outcome,
            elapsed,
            detail,
        });
    }

    /// Notes in the summary when the last run of `step` passed but took longer than `budget`.
    pub(super) fn check_budget(&mut self, step: &str, budget: Duration) {
        if let Some(record) = self.records.iter_mut().rev().find(|r| r.step == step)
            && let Some(elapsed) = record.elapsed
            && elapsed > budget
        {
            let note = format!("over budget ({})", format_duration(budget));
            record.detail = if record.detail.is_empty() {
                note
            } else {
                format!("{}; {note}", record.detail)
            };
        }
    }

    pub(super) fn print(&self, passed: bool, elapsed: Duration) {
        println!("\n==> ci summary");
        for record in &self.records {
            let outcome = match record.outcome {
                Outcome::Passed => "ok",
                Outcome::Failed => "FAILED",
                Outcome::Skipped => "skipped",
            };
            let elapsed = record.elapsed.map(format_duration).unwrap_or_default();
            println!(
                "  {outcome:<8} {:<24} {elapsed:>8}  {}",
                record.step, record.detail
            );
        }
        let ran: Vec<&str> = [
            "fmt",
            "clippy",
            "check (sqlite only)",
            "check (postgres only)",
            "test (SQLite)",
            "PostgreSQL server",
            "test (PostgreSQL)",
        ]
        .into_iter()
        .chain(PACKAGING_STEPS.iter().map(|step| step.name))
        .filter(|step| !self.records.iter().any(|r| r.step == *step))
        .collect();
        if !passed && !ran.is_empty() {
            println!("  not run: {}", ran.join(", "));
        }
        let verdict = if passed { "passed" } else { "FAILED" };
        println!("ci {verdict} in {}", format_duration(elapsed));
        if let Some(tests) = self.tests {
            println!("tests: {tests}");
        }
        let _ = std::io::stdout().flush();
    }
}

pub(super) fn format_duration(d: Duration) -> String {
    let secs = d.as_secs_f64();
    if secs < 60.0 {
        format!("{secs:.1}s")
    } else {
        let whole = d.as_secs();
        format!("{}m{:02}s", whole / 60, whole % 60)
    }
}

/// The command line as one would type it (program name shortened to its file name).
pub(super) fn display_command(cmd: &Command) -> String {
    let program = Path::new(cmd.get_program())
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let mut line = program;
    for arg in cmd.get_args() {
        line.push(' ');
        line.push_str(&arg.to_string_lossy());
    }
    line
}

/// Hides the password of a `scheme://user:password@host/...` URL.
pub(super) fn redact(url: &str) -> String {
    let Some(scheme_end) = url.find("://").map(|i| i + 3) else {
        return url.to_owned();
    };
    let authority_end = url[scheme_end..]
        .find('/')
        .map_or(url.len(), |i| scheme_end + i);
    let authority = &url[scheme_end..authority_end];
    let Some(at) = authority.rfind('@') else {
        return url.to_owned();
    };
    let userinfo = &authority[..at];
    match userinfo.split_once(':') {
        Some((user, _)) => format!(
            "{}{user}:***{}",
            &url[..scheme_end],
            &url[scheme_end + at..]
        ),
        None => url.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn test_result_lines_are_summed() {
        let mut counts = TestCounts::default();
        counts.add_line(
            "test result: ok. 12 passed; 0 failed; 2 ignored; 0 measured; 0 filtered out; finished in 0.01s",
        );
        counts.add_line(
            "test result: FAILED. 3 passed; 1 failed; 0 ignored; 0 measured; 5 filtered out",
        );
        counts.add_line("running 4 tests");
        counts.add_line("test passed ... ok");
        assert_eq!(
            counts,
            TestCounts {
                passed: 15,
                failed: 1,
                ignored: 2
            }
        );
        assert_eq!(counts.to_string(), "15 passed, 1 failed, 2 skipped");
    }

    #[test]
    fn redact_hides_only_the_password() {
        assert_eq!(
            redact("postgres://u:secret@h:5432/db?x=1"),
            "postgres://u:***@h:5432/db?x=1"
        );
        assert_eq!(
            redact("postgres://postgres@127.0.0.1:5/postgres"),
            "postgres://postgres@127.0.0.1:5/postgres"
        );
        assert_eq!(redact("not a url"), "not a url");
    }

    #[test]
    fn durations_read_naturally() {
        assert_eq!(format_duration(Duration::from_millis(1500)), "1.5s");
        assert_eq!(format_duration(Duration::from_secs(125)), "2m05s");
    }

    #[test]
    fn a_step_over_its_budget_is_noted_in_the_summary() {
        let mut report = Report::default();
        report.push(
            "doc",
            Outcome::Passed,
            Some(Duration::from_secs(200)),
            String::new(),
        );
        report.push(
            "package",
            Outcome::Passed,
            Some(Duration::from_secs(10)),
            "x".to_owned(),
        );
        report.check_budget("doc", Duration::from_secs(180));
        report.check_budget("package", Duration::from_secs(600));
        assert_eq!(report.records[0].detail, "over budget (3m00s)");
        assert_eq!(report.records[1].detail, "x");
    }
}
