//! Timing work on several threads at once, for the scaling measurements (`bench fresh
//! --threads`, `bench syscalls`).

use std::time::{Duration, Instant};

/// How long `threads` threads take to each run `work(seed)` at once, with a seed of
/// `seed + thread`: the slowest thread's time, each thread timing itself from when all are
/// ready. Each thread first runs `warm_up(seed)`, untimed, so that what a thread sets up on
/// first use (its kept entries, texts and memory slots) is not counted: a server's workers
/// live long. A new thread starts on its parent's core, so each then spins for 20 ms, long
/// enough for the scheduler to have spread them over the cores before the timing starts.
pub fn slowest(
    threads: usize,
    seed: u64,
    warm_up: impl Fn(u64) -> anyhow::Result<()> + Sync,
    work: impl Fn(u64) -> anyhow::Result<()> + Sync,
) -> anyhow::Result<Duration> {
    let barrier = std::sync::Barrier::new(threads);
    std::thread::scope(|s| {
        let workers: Vec<_> = (0..threads as u64)
            .map(|thread| {
                let (barrier, work, warm_up) = (&barrier, &work, &warm_up);
                s.spawn(move || {
                    warm_up(seed + thread)?;
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
