//! What several crates' tests need alike, in one place: temporary directories, running a
//! command that prints JSON lines, process-wide resource counters, and running code in a forked
//! child under seccomp's strict mode. Not published; only tests depend on it.

#![warn(clippy::undocumented_unsafe_blocks)]

use std::process::Command;

pub use tempfile::TempDir;

/// A fresh temporary directory, removed when dropped.
pub fn temp_dir() -> TempDir {
    tempfile::Builder::new()
        .prefix("ephem-test-")
        .tempdir()
        .expect("a temporary directory")
}

/// Runs `cmd`, which must succeed, and parses each line of its standard output as JSON.
pub fn json_lines(cmd: &mut Command) -> Vec<serde_json::Value> {
    let out = cmd.output().expect("the command starts");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout)
        .expect("UTF-8 output")
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect()
}

/// This process's resident memory, in KiB.
pub fn resident_kib() -> usize {
    let statm = std::fs::read_to_string("/proc/self/statm").expect("/proc/self/statm");
    let pages: usize = statm
        .split_whitespace()
        .nth(1)
        .and_then(|p| p.parse().ok())
        .expect("statm's second field");
    pages * 4
}

/// How many file descriptors this process has open.
pub fn open_fds() -> usize {
    std::fs::read_dir("/proc/self/fd")
        .expect("/proc/self/fd")
        .count()
}

/// Runs `warm_up`, then `measured`, and asserts that `measured` left no more file descriptors
/// open and grew resident memory by less than `max_growth_kib` (`what` names the work in
/// messages).
pub fn assert_no_growth(
    warm_up: impl FnOnce(),
    measured: impl FnOnce(),
    max_growth_kib: usize,
    what: &str,
) {
    warm_up();
    let (rss, fds) = (resident_kib(), open_fds());
    measured();
    assert_eq!(open_fds(), fds, "file descriptors leaked over {what}");
    let grown = resident_kib().saturating_sub(rss);
    assert!(
        grown < max_growth_kib,
        "resident memory grew by {grown} KiB over {what}"
    );
}

/// Asserts that `run` (which says whether its result was right) makes no system call once
/// warm: it runs 100 times here (signal handlers, the thread's stack bounds, pools, the heap),
/// then 1 000 times in a forked child under seccomp's strict mode, which any other system
/// call than `read`, `write` and `exit` kills, as it does a signal (see [`under_seccomp`]).
///
/// # Safety
/// As for [`under_seccomp`]: the test binary runs only this test, and `run` does not unwind
/// when it succeeds.
pub unsafe fn assert_no_system_call(run: impl Fn() -> bool) {
    for _ in 0..100 {
        assert!(run(), "wrong result while warming up");
    }
    // SAFETY: per the contract.
    let status = unsafe { under_seccomp(|| if (0..1000).all(|_| run()) { 0 } else { 1 }) };
    assert!(
        libc::WIFEXITED(status),
        "the child made a system call or took a fault signal (killed by signal {})",
        libc::WTERMSIG(status)
    );
    assert_eq!(libc::WEXITSTATUS(status), 0, "wrong results");
}

/// Runs `child` in a forked copy of this process under seccomp's strict mode, where any system
/// call but `read`, `write` and `exit` kills it; the child exits with `child`'s result. A
/// fault signal kills it too (a trap by signal, whose return, `sigreturn`, strict mode
/// allows): the child blocks them, and the kernel kills a thread that faults with its fault
/// signal blocked. Returns the child's wait status (see `libc::WIFEXITED` and friends); exit
/// code 3 means strict mode could not be entered.
///
/// # Safety
/// The child is a copy of the calling thread only: `child` must not take a lock or use state
/// another thread of this process could hold at the fork (run such tests one at a time, or in
/// a test binary of their own), and must not unwind.
pub unsafe fn under_seccomp(child: impl FnOnce() -> i32) -> i32 {
    // SAFETY: per the contract.
    let pid = unsafe { libc::fork() };
    assert!(pid >= 0, "fork failed");
    if pid == 0 {
        // SAFETY: the signal mask, prctl and exit are plain system calls; the child leaves with
        // a raw exit and never returns into the caller.
        unsafe {
            let mut faults = std::mem::zeroed();
            libc::sigemptyset(&mut faults);
            for signal in [
                libc::SIGSEGV,
                libc::SIGBUS,
                libc::SIGILL,
                libc::SIGFPE,
                libc::SIGTRAP,
            ] {
                libc::sigaddset(&mut faults, signal);
            }
            if libc::pthread_sigmask(libc::SIG_BLOCK, &faults, std::ptr::null_mut()) != 0
                || libc::prctl(libc::PR_SET_SECCOMP, libc::SECCOMP_MODE_STRICT) != 0
            {
                libc::syscall(libc::SYS_exit, 3);
            }
            let code = child();
            libc::syscall(libc::SYS_exit, code);
        }
        unreachable!("exit returned");
    }
    let mut status = 0;
    // SAFETY: waiting for our own child.
    assert_eq!(unsafe { libc::waitpid(pid, &mut status, 0) }, pid);
    status
}
