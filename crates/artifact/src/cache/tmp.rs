//! Temporary files and atomic writes. A temporary file is named after the file it is for, its
//! writer's process id and a counter (`.NAME.PID.N.tmp`), in the same directory, so that a
//! rename puts it in place atomically and anyone can tell whose it is.
//!
//! Invariants: a path written with [`write_atomic`] never holds a partial file and is never
//! written in place (a read-only temporary file, flushed to disk, is renamed over it); a failed
//! write leaves no temporary file behind. A temporary file is stale once its writer is gone, or
//! older than [`STALE_TEMP_SECS`] whoever runs with its writer's id; this assumes the processes
//! sharing a directory share a pid namespace.

use std::io::Write;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

/// File name extension of temporary files.
pub(super) const TEMP_EXT: &str = "tmp";

/// A temporary file older than this is stale even if a process with its writer's id runs.
pub const STALE_TEMP_SECS: u64 = 600;

static TEMP_COUNTER: AtomicU64 = AtomicU64::new(0);

/// A temporary file for `path` in its directory: `.NAME.PID.N.tmp`.
fn temp_path(path: &Path) -> PathBuf {
    let dir = path.parent().unwrap_or(Path::new("."));
    let name = path.file_name().unwrap_or_default().to_string_lossy();
    dir.join(format!(
        ".{name}.{}.{}.{TEMP_EXT}",
        std::process::id(),
        TEMP_COUNTER.fetch_add(1, Ordering::Relaxed)
    ))
}

/// The process id a temporary file's name records.
fn temp_writer(path: &Path) -> Option<u32> {
    let name = path.file_name()?.to_str()?;
    let mut parts = name.rsplit('.');
    let (_tmp, _n, pid) = (parts.next()?, parts.next()?, parts.next()?);
    pid.parse().ok()
}

/// Whether a process with this id exists (in this pid namespace).
fn process_runs(pid: u32) -> bool {
    let Some(pid) = i32::try_from(pid)
        .ok()
        .and_then(rustix::process::Pid::from_raw)
    else {
        return false;
    };
    match rustix::process::test_kill_process(pid) {
        Ok(()) => true,
        // It exists but belongs to someone else.
        Err(e) => e == rustix::io::Errno::PERM,
    }
}

/// Whether the temporary file at `path`, last modified at `mtime` (seconds), is stale at `now`:
/// older than [`STALE_TEMP_SECS`], or its writer no longer runs.
pub(super) fn is_stale(path: &Path, mtime: i64, now: i64) -> bool {
    now - mtime > STALE_TEMP_SECS as i64 || !temp_writer(path).is_some_and(process_runs)
}

/// Writes `bytes` to `path` so that `path` never holds a partial file and is never written in
/// place: a read-only temporary file (mode 0444) in the same directory, flushed to disk, then
/// renamed over `path`.
pub fn write_atomic(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let temp = write_temp(path, bytes, 0o444)?;
    let renamed = std::fs::rename(&temp, path);
    if renamed.is_err() {
        let _ = std::fs::remove_file(&temp);
    }
    renamed
}

/// Writes `bytes` to a new temporary file for `path` (see [`temp_path`]) with exactly `mode`,
/// flushed to disk; returns its path. Nothing is left behind on failure.
pub(crate) fn write_temp(path: &Path, bytes: &[u8], mode: u32) -> std::io::Result<PathBuf> {
    let dir = path.parent().unwrap_or(Path::new("."));
    std::fs::create_dir_all(dir)?;
    let temp = temp_path(path);
    let result = (|| {
        let mut file = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(mode)
            .open(&temp)?;
        // The umask may have taken bits away; `mode` is what is wanted, whatever it is.
        file.set_permissions(std::fs::Permissions::from_mode(mode))?;
        file.write_all(bytes)?;
        file.sync_all()
    })();
    match result {
        Ok(()) => Ok(temp),
        Err(e) => {
            let _ = std::fs::remove_file(&temp);
            Err(e)
        }
    }
}
