//! Handing the memory a directory snapshot freed back to the operating system.
//!
//! glibc's allocator keeps what a program frees in its arenas for reuse, and gives back only
//! what sits at the top of a heap. A snapshot apply allocates about 1.2 KiB per membership (the
//! body, the parsed snapshot, the planned rows) and frees it all when it ends, so without a
//! trim the process keeps most of it resident: 0.7–0.8 GiB after a 1,000,000-membership
//! snapshot whose peak was 1.2 GiB, against 15 MiB idle (docs/benchmarks.md, "Through the HTTP path"). `malloc_trim(0)` walks
//! every arena and returns its free pages; it took 29 ms after that snapshot.

/// Asks glibc to return the free pages of every arena to the operating system
/// (`malloc_trim(0)`). Returns whether it gave anything back. Other targets (musl, macOS,
/// Windows) have no such call: it does nothing there and returns `false`.
///
/// It locks each arena while it walks it, so call it once after a large piece of work ends
/// (the projector does after a snapshot), on a thread that may block.
#[cfg(all(target_os = "linux", target_env = "gnu"))]
#[expect(unsafe_code, reason = "one FFI call into glibc; see the SAFETY note")]
pub(crate) fn return_freed() -> bool {
    // SAFETY: `malloc_trim` takes no pointer and reads no caller memory; glibc takes each
    // arena's lock while it trims it, so it is safe beside other threads that allocate.
    unsafe { libc::malloc_trim(0) == 1 }
}

/// Asks the allocator to return freed memory: nothing to ask outside glibc.
#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
pub(crate) fn return_freed() -> bool {
    false
}
