//! Timing work on several threads at once, for the scaling measurements (`bench fresh
//! --threads`, `bench syscalls`).

use std::time::{Duration, Instant};

/// How long `threads` threads take to each run `work(seed)` at once, with a seed of
/// `seed + thread`: the slowest thread's time, each thread timing itself from when all are
/// ready. A new thread starts on its parent's core, so each first spins for 20 ms, long
/// enough for the scheduler to have spread them over the cores before the timing starts.
pub fn slowest(
    threads: usize,
    seed: u64,
    work: impl Fn(u64) -> anyhow::Result<()> + Sync,
) -> anyhow::Result<Duration> {
    let barrier = std::sync::Barrier::new(threads);
    std::thread::scope(|s| {
        let workers: Vec<_> = (0..threads as u64)
            .map(|thread| {
                let (barrier, work) = (&barrier, &work);
                s.spawn(move || {
                    let warm = Instant::now();
                    while warm.elapsed() < Duration::from_millis(20) {
                        std::hint::spin_loop();
                    }
                    barrier.wait();
                    let start = Instant::now();
                    work(seed + thread)?;
                    Ok::<_, anyhow::Error>(start.elapsed())
                })
            })
            .collect();
        let mut slowest = Duration::ZERO;
        for w in workers {
            slowest = slowest.max(w.join().expect("a benchmark thread panicked")?);
        }
        Ok(slowest)
    })
}
