//! The `tenantry` binary: parses the command line and hands over to [`tenantry_app::cli`].

fn main() -> std::process::ExitCode {
    tenantry_app::cli::main()
}
