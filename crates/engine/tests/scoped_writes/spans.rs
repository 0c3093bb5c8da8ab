//! The `fenced_write` span (docs/operations.md, "Traces"): every run is traced when a
//! subscriber is installed, with its fence mode; a process without one pays nothing for it.

use std::io::Write;

use tracing_subscriber::fmt::MakeWriter;
use tracing_subscriber::fmt::format::FmtSpan;

use super::*;

/// Collects what the formatter writes.
#[derive(Clone, Default)]
struct Captured(Arc<Mutex<Vec<u8>>>);

impl Write for Captured {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(bytes);
        Ok(bytes.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl<'a> MakeWriter<'a> for Captured {
    type Writer = Captured;

    fn make_writer(&'a self) -> Self::Writer {
        self.clone()
    }
}

#[tokio::test(flavor = "current_thread")]
async fn every_run_is_traced_as_fenced_write_with_its_mode_when_a_subscriber_is_installed() {
    let captured = Captured::default();
    let subscriber = tracing_subscriber::fmt()
        .with_writer(captured.clone())
        .with_span_events(FmtSpan::CLOSE)
        .with_ansi(false)
        .finish();
    let _default = tracing::subscriber::set_default(subscriber);
    let writes = ScopedWrites::new(Arc::new(InMemoryHostStorage::new()));
    for mode in [FenceMode::Enforce, FenceMode::AllowFenced] {
        let done: Result<(), Infallible> = writes
            .run(&binding(), &kb("kb-traced"), mode, |_ctx| async { Ok(()) })
            .await;
        done.unwrap();
    }
    let text = String::from_utf8(captured.0.lock().unwrap().clone()).unwrap();
    let closed: Vec<&str> = text
        .lines()
        .filter(|line| line.contains("fenced_write") && line.contains("close"))
        .collect();
    assert_eq!(closed.len(), 2, "one closed span per run: {text}");
    assert!(closed[0].contains("mode=Enforce"), "{}", closed[0]);
    assert!(closed[1].contains("mode=AllowFenced"), "{}", closed[1]);
}
