//! The `tenantry-demo` binary: parses the command line and hands over to
//! [`tenantry_demo::cli`].

fn main() -> std::process::ExitCode {
    tenantry_demo::cli::main()
}
