//! How the system calls the fresh path makes scale from one thread to several on this machine.
//!
//! Where the fresh path makes system calls (opening an artifact, a reset's page map), its
//! throughput on N threads can only scale as well as they do
//! (docs/bench-log/fresh-path-05-pagemap-scan.md). This measures that ceiling apart from
//! ephem: each operation alone, on one thread and on N at once, in short
//! paired turns, with the scaling N × (time per operation on one thread) / (time per operation
//! on N threads), the median over the turns.
//!
//! - `getppid`: the cheapest system call; touches nothing shared.
//! - `open-read-close`: `openat` + `fstat` + a 16 KiB `pread` + `close` of one file, as opening
//!   an artifact does (every thread opens the same file, as threads running one module do).
//! - `openat-close`: the same without reading: what the descriptor table and the directory's
//!   descriptor (shared by every thread) cost.
//! - `open-close`: the same by absolute path, without a directory descriptor.
//! - `pread`: a 16 KiB `pread` from one descriptor all threads share.
//! - `pagemap-scan`: what a memory reset asks the kernel (`ephem_runtime::pagemap::touched`),
//!   each thread about a 1 MiB region of its own with 16 pages touched.
//! - `compute`: arithmetic only, no system call: what the machine's cores give.

use std::os::fd::{AsFd, OwnedFd};
use std::time::Duration;

use anyhow::Context;

#[derive(clap::Args)]
pub struct Args {
    /// Threads to run each operation on at once.
    #[arg(long, default_value_t = 2)]
    threads: usize,
    /// Operations per thread.
    #[arg(long, default_value_t = 200_000)]
    ops: usize,
    /// One JSON object per line instead of a table.
    #[arg(long)]
    json: bool,
}

pub fn run(args: Args) -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    std::fs::write(dir.path().join("file"), vec![7u8; 64 << 10])?;
    let dir_fd = rustix::fs::open(
        dir.path(),
        rustix::fs::OFlags::RDONLY | rustix::fs::OFlags::DIRECTORY | rustix::fs::OFlags::CLOEXEC,
        rustix::fs::Mode::empty(),
    )
    .context("opening the temporary directory")?;
    let shared = open(&dir_fd)?;
    let path = dir.path().join("file");
    let ops: [(&str, &(dyn Fn() -> anyhow::Result<()> + Sync)); 7] = [
        ("getppid", &|| {
            std::hint::black_box(rustix::process::getppid());
            Ok(())
        }),
        ("open-read-close", &|| {
            let fd = open(&dir_fd)?;
            std::hint::black_box(rustix::fs::fstat(&fd)?);
            read(&fd)
        }),
        ("openat-close", &|| open(&dir_fd).map(drop)),
        ("open-close", &|| {
            let fd = rustix::fs::open(
                &path,
                rustix::fs::OFlags::RDONLY | rustix::fs::OFlags::CLOEXEC,
                rustix::fs::Mode::empty(),
            )?;
            drop(fd);
            Ok(())
        }),
        ("pread", &|| read(&shared)),
        ("pagemap-scan", &scan_own_region),
        ("compute", &|| {
            let mut x = std::hint::black_box(1u64);
            for _ in 0..200 {
                x = x.wrapping_mul(6364136223846793005).wrapping_add(1);
                x ^= x >> 13;
            }
            std::hint::black_box(x);
            Ok(())
        }),
    ];
    if !args.json {
        println!(
            "{:<16} {:>14} {:>18} {:>8}",
            "operation",
            "1 thread ns/op",
            format!("{} threads ns/op", args.threads),
            "scaling"
        );
    }
    for (name, op) in ops {
        // Short turns of one thread and of N, paired: this machine's speed drifts between
        // them otherwise.
        let (mut one, mut many, mut scaling) = (Vec::new(), Vec::new(), Vec::new());
        for _ in 0..ROUNDS {
            let (o, m) = (
                per_op(op, 1, args.ops / ROUNDS)?,
                per_op(op, args.threads, args.ops / ROUNDS)?,
            );
            scaling.push(args.threads as f64 * o.as_secs_f64() / m.as_secs_f64());
            one.push(o);
            many.push(m);
        }
        let (one, many) = (crate::median(one), crate::median(many));
        scaling.sort_by(f64::total_cmp);
        let scaling = scaling[ROUNDS / 2];
        if args.json {
            println!(
                "{}",
                serde_json::json!({
                    "operation": name,
                    "threads": args.threads,
                    "one_thread_ns": one.as_nanos() as u64,
                    "threads_ns": many.as_nanos() as u64,
                    "scaling": scaling,
                })
            );
        } else {
            println!(
                "{name:<16} {:>14} {:>18} {scaling:>7.2}×",
                one.as_nanos(),
                many.as_nanos()
            );
        }
    }
    Ok(())
}

/// Paired turns per operation; the scaling reported is their median.
const ROUNDS: usize = 15;

fn open(dir: &OwnedFd) -> anyhow::Result<OwnedFd> {
    Ok(rustix::fs::openat(
        dir,
        "file",
        rustix::fs::OFlags::RDONLY | rustix::fs::OFlags::CLOEXEC,
        rustix::fs::Mode::empty(),
    )?)
}

/// Asks the page map about this thread's region: an anonymous mapping, as a memory slot is,
/// made on first use with 16 of its pages written.
fn scan_own_region() -> anyhow::Result<()> {
    use ephem_runtime::pagemap::{PAGE, Pages, touched};
    const LEN: usize = 1 << 20;
    struct Region(*mut u8, std::cell::RefCell<Vec<Pages>>);
    impl Drop for Region {
        fn drop(&mut self) {
            // SAFETY: our own mapping, which nothing refers to any more.
            let _ = unsafe { rustix::mm::munmap(self.0.cast(), LEN) };
        }
    }
    thread_local! {
        static REGION: Region = {
            use rustix::mm::{MapFlags, ProtFlags, mmap_anonymous};
            // SAFETY: a new private mapping, at an address the kernel picks.
            let at = unsafe {
                mmap_anonymous(std::ptr::null_mut(), LEN, ProtFlags::READ | ProtFlags::WRITE, MapFlags::PRIVATE)
            }
            .expect("a 1 MiB mapping")
            .cast::<u8>();
            for page in 0..16 {
                // SAFETY: inside the mapping just made.
                unsafe { at.add(page * 16 * PAGE).write(1) };
            }
            Region(at, Default::default())
        };
    }
    REGION.with(|Region(at, runs)| {
        anyhow::ensure!(
            touched(*at, LEN, false, &mut runs.borrow_mut()),
            "the page map cannot be read here"
        );
        Ok(())
    })
}

fn read(fd: &OwnedFd) -> anyhow::Result<()> {
    let mut buf = [0u8; 16 << 10];
    rustix::io::pread(fd.as_fd(), &mut buf, 0)?;
    std::hint::black_box(&buf);
    Ok(())
}

/// Time per operation with `threads` threads each running `ops` of it at once (see
/// [`crate::threads::slowest`]).
fn per_op(
    op: &(dyn Fn() -> anyhow::Result<()> + Sync),
    threads: usize,
    ops: usize,
) -> anyhow::Result<Duration> {
    let time =
        crate::threads::slowest(threads, 0, |_| Ok(()), |_| (0..ops).try_for_each(|_| op()))?;
    Ok(time / ops as u32)
}
