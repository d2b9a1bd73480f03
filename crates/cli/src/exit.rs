//! How the command line ends: its exit codes, and error messages printed once.
//!
//! | code | meaning |
//! | --- | --- |
//! | 0 | success |
//! | 1 | an error: unreadable or invalid module, missing imports, I/O, resource limits |
//! | 2 | a usage error: bad flags or arguments (clap's own code for them too) |
//! | 134 | the guest trapped (what a process killed by `SIGABRT` reports, as wasmtime does) |
//!
//! A guest's own exit status (WASI's `proc_exit`) is passed through as it is when it fits in
//! 0..=255; one outside that range (which a process cannot report) becomes 1, never a wrapped
//! value that could read as success.

use std::process::ExitCode;

/// Success.
pub const SUCCESS: u8 = 0;
/// Any error that is neither a usage error nor a trap.
pub const ERROR: u8 = 1;
/// Bad flags or arguments.
pub const USAGE: u8 = 2;
/// The guest trapped.
pub const TRAP: u8 = 134;

/// A usage error found after parsing the flags (an argument of the wrong type, say).
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct Usage(pub String);

/// The status the guest gave `proc_exit`, if that is what ended the run.
fn guest_exit(error: &anyhow::Error) -> Option<u8> {
    // (A component's `run` returning `err` is an `I32Exit` of the command's own.)
    let status = error.chain().find_map(|c| {
        (c.downcast_ref::<ephem::Error>())
            .and_then(ephem_wasi::exit_code)
            .or_else(|| c.downcast_ref::<ephem_wasi::I32Exit>().map(|e| e.0))
    })?;
    Some(u8::try_from(status).unwrap_or(ERROR))
}

/// The exit code for `error`.
pub fn code(error: &anyhow::Error) -> u8 {
    if let Some(status) = guest_exit(error) {
        return status;
    }
    for cause in error.chain() {
        if cause.downcast_ref::<Usage>().is_some() {
            return USAGE;
        }
        if let Some(e) = cause.downcast_ref::<ephem::Error>()
            && e.kind() == ephem::ErrorKind::Trap
        {
            return TRAP;
        }
        // A component that broke the canonical ABI on its way out traps, as in wasmtime.
        if let Some(ephem::component::Error::Abi(_)) = cause.downcast_ref() {
            return TRAP;
        }
    }
    ERROR
}

/// `error` and its causes on one line, each said once: a cause whose text the message before
/// it already contains is not repeated.
pub fn message(error: &anyhow::Error) -> String {
    let mut out = String::new();
    for cause in error.chain() {
        let text = cause.to_string();
        if !out.contains(&text) {
            if !out.is_empty() {
                out.push_str(": ");
            }
            out.push_str(&text);
        }
    }
    out
}

/// Whether `error` is a write to a pipe whose reader is gone.
fn closed_pipe(error: &anyhow::Error) -> bool {
    error.chain().any(|c| {
        c.downcast_ref::<std::io::Error>()
            .is_some_and(|e| e.kind() == std::io::ErrorKind::BrokenPipe)
    })
}

/// Ends the process for `result`: the message on standard error and the code.
pub fn finish(result: anyhow::Result<()>) -> ExitCode {
    ExitCode::from(report(result))
}

/// The message for `result` on standard error, and the code the process ends with (for a
/// thread that ends the process itself, `std::process::exit`).
pub fn report(result: anyhow::Result<()>) -> u8 {
    match result {
        Ok(()) => SUCCESS,
        // Whoever read our output stopped reading (`| head`): nothing is wrong on our side.
        Err(e) if closed_pipe(&e) => SUCCESS,
        // The guest chose to exit: its status, and nothing of ours on stderr.
        Err(e) if guest_exit(&e).is_some() => code(&e),
        Err(e) => {
            // (Not `eprintln!`, which panics when standard error is closed: the code must
            // come back whatever happens to the message.)
            use std::io::Write;
            let _ = writeln!(std::io::stderr(), "error: {}", message(&e));
            code(&e)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, thiserror::Error)]
    #[error("outer says: {0}")]
    struct Repeats(#[source] Inner);

    #[derive(Debug, thiserror::Error)]
    #[error("the inner cause")]
    struct Inner;

    #[test]
    fn a_cause_already_in_the_message_is_said_once() {
        let e = anyhow::Error::new(Repeats(Inner)).context("compiling x.wasm");
        assert_eq!(message(&e), "compiling x.wasm: outer says: the inner cause");
        let e = anyhow::Error::new(Inner).context("compiling x.wasm");
        assert_eq!(message(&e), "compiling x.wasm: the inner cause");
    }

    #[test]
    fn traps_and_usage_errors_have_their_own_codes() {
        let usage = anyhow::Error::new(Usage("bad".into())).context("running");
        assert_eq!(code(&usage), USAGE);
        let other = anyhow::anyhow!("no such file");
        assert_eq!(code(&other), ERROR);
    }
}
