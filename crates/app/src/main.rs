//! The `tenantry` binary: parses the command line and hands over to [`tenantry_app::cli`].
//!
//! The process allocates with mimalloc instead of the system allocator: in a drain of the
//! lifecycle outbox glibc's malloc and free were about a third of the process's CPU per
//! command, and mimalloc cut that CPU by about 28 % (docs/benchmarks.md, "Side by side with the
//! peers").

/// The process-wide allocator (see the module comment).
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> std::process::ExitCode {
    tenantry_app::cli::main()
}
