//! `ephem bench thresholds`: copying against mapping, across sizes, for the two choices the
//! engine makes by size (see `EngineConfig::map_text_at` and `MemoryConfig::map_image_at`).
//!
//! - **text**: read from an artifact file into a `dual` code slot and publish, against mapping
//!   the file's pages read+execute; then touching the first page only (a call that runs a little
//!   code) or every page (one that runs all of it); then dropping.
//! - **image**: a fresh instance of a module whose memory image has the size, with the image
//!   copied into its pooled memory slot (whose pages are kept resident, and zeroed in place when
//!   the slot is reset) against mapped copy-on-write from the artifact; then reading no page or
//!   every page of the image from the host; then dropping. Slots do not keep images between
//!   instances (`MemoryConfig::reuse_images` off): each instance pays for its image.
//!
//! Each row is the median of many repetitions, both ways measured in the same run.

use std::os::unix::fs::FileExt;
use std::time::{Duration, Instant};

use anyhow::Context;
use ephem::{Compiler, Engine, EngineConfig, Instance, MemoryConfig, Module, Store};
use ephem_code_memory::{CodePool, LoadedCode, PoolConfig};

use crate::median;

#[derive(clap::Args)]
pub struct Args {
    /// Sizes to measure, with an optional k or m suffix.
    #[arg(long, value_delimiter = ',', value_parser = ephem::units::parse_nonzero_size,
          default_value = "4k,16k,64k,256k,1m,4m,16m")]
    sizes: Vec<usize>,
    /// Repetitions per size and way (default: scaled to the size).
    #[arg(long)]
    repeat: Option<usize>,
    /// One JSON object per line instead of tables.
    #[arg(long)]
    json: bool,
}

/// Reads one byte of every page of `[ptr, ptr + len)`: the page faults a run over all of it
/// would take.
fn touch_pages(code: &LoadedCode, every_page: bool) {
    let pages = if every_page {
        code.len().div_ceil(4096)
    } else {
        1
    };
    for p in 0..pages {
        // SAFETY: inside the published code, which is mapped readable for `code`'s lifetime.
        unsafe { std::ptr::read_volatile(code.as_ptr().add(p * 4096)) };
    }
}

fn text_row(dir: &std::path::Path, size: usize, repeat: usize) -> anyhow::Result<[Duration; 4]> {
    let path = dir.join(format!("text-{size}"));
    std::fs::write(&path, vec![0xCCu8; size])?;
    let file = std::fs::File::open(&path)?;
    let pool = CodePool::new(PoolConfig {
        slot_size: size.next_power_of_two(),
        max_slot_size: size.next_power_of_two().max(1 << 20),
        prefault_slots: 1,
        ..PoolConfig::default()
    })?;
    let copy = |every: bool| -> anyhow::Result<Duration> {
        let t = Instant::now();
        let mut slot = pool.acquire(size)?;
        file.read_exact_at(slot.bytes_mut(), 0)?;
        let code = slot.publish()?;
        touch_pages(&code, every);
        drop(code);
        Ok(t.elapsed())
    };
    let map = |every: bool| -> anyhow::Result<Duration> {
        let t = Instant::now();
        let code = LoadedCode::map_file(std::os::fd::AsFd::as_fd(&file), 0, size, 0, None)?;
        touch_pages(&code, every);
        drop(code);
        Ok(t.elapsed())
    };
    let mut out = [Duration::ZERO; 4];
    for (k, every) in [false, true].into_iter().enumerate() {
        copy(every)?;
        map(every)?;
        let (mut c, mut m) = (Vec::new(), Vec::new());
        for _ in 0..repeat {
            c.push(copy(every)?);
            m.push(map(every)?);
        }
        out[2 * k] = median(c);
        out[2 * k + 1] = median(m);
    }
    Ok(out)
}

fn image_row(
    compiler: &Compiler,
    dir: &std::path::Path,
    size: usize,
    repeat: usize,
) -> anyhow::Result<[Duration; 4]> {
    // A module whose one data segment fills `size` bytes from address 0.
    let pages = size.div_ceil(65536).max(1);
    let wat = format!(r#"(module (memory (export "m") {pages}) (data (i32.const 0) "x"))"#);
    let mut compiled = compiler.compile(wat.as_bytes())?;
    compiled.data = (0..size).map(|i| (i % 251) as u8 + 1).collect();
    compiled.info.datas[0].range = 0..size as u32;
    let path = dir.join(format!("image-{size}.ephem"));
    let key = ephem::ArtifactKey::generate()?;
    ephem_artifact::write_atomic(&path, &ephem_artifact::to_bytes(&compiled, &[0; 32], &key))?;

    // Slots do not keep their images between instances here: every instance pays for its
    // image, as one of a module that was not run just before would.
    let engine = |map_image_at, keep_resident| {
        Engine::with_config(EngineConfig {
            memory: MemoryConfig {
                map_image_at,
                keep_resident,
                reuse_images: false,
                ..MemoryConfig::default()
            },
            ..EngineConfig::default()
        })
    };
    // Copying keeps the image's pages resident (zeroed in place on reset), as it must to be
    // cheap; mapping keeps the default.
    let copying = engine(usize::MAX, size.max(MemoryConfig::default().keep_resident))?;
    let mapping = engine(0, MemoryConfig::default().keep_resident)?;
    let run = |engine: &Engine, every: bool| -> anyhow::Result<Duration> {
        let module = Module::from_artifact_file(engine, &path, &key)?;
        let t = Instant::now();
        let mut store = Store::new(engine, ());
        let instance = Instance::new(&mut store, &module, &[])?;
        let mut byte = [0u8];
        if every {
            let mem = instance_memory(&mut store, instance)?;
            for at in (0..size).step_by(4096) {
                mem.read(&store, at, &mut byte)?;
            }
        }
        drop(store);
        Ok(t.elapsed())
    };
    let mut out = [Duration::ZERO; 4];
    for (k, every) in [false, true].into_iter().enumerate() {
        run(&copying, every)?;
        run(&mapping, every)?;
        let (mut c, mut m) = (Vec::new(), Vec::new());
        for _ in 0..repeat {
            c.push(run(&copying, every)?);
            m.push(run(&mapping, every)?);
        }
        out[2 * k] = median(c);
        out[2 * k + 1] = median(m);
    }
    Ok(out)
}

fn instance_memory(store: &mut Store<()>, instance: Instance) -> anyhow::Result<ephem::Memory> {
    instance
        .exports(store)
        .into_iter()
        .find_map(|(_, e)| e.into_memory())
        .context("the module exports no memory")
}

fn us(d: Duration) -> String {
    format!("{:.1}", d.as_nanos() as f64 / 1000.0)
}

pub fn run(args: Args) -> anyhow::Result<()> {
    let tmp = tempfile::Builder::new()
        .prefix("ephem-thresholds-")
        .tempdir()?;
    let dir = tmp.path();
    let compiler = Compiler::new()?;
    {
        for (what, cols) in [
            (
                "text",
                ["copy, 1 page", "map, 1 page", "copy, all", "map, all"],
            ),
            (
                "image",
                ["copy, none", "map, none", "copy, all", "map, all"],
            ),
        ] {
            if !args.json {
                println!("\n{what}: µs per load, median");
                println!(
                    "{:>8} {:>14} {:>14} {:>14} {:>14}",
                    "size", cols[0], cols[1], cols[2], cols[3]
                );
            }
            for &size in &args.sizes {
                let repeat = args
                    .repeat
                    .unwrap_or(((32usize << 20) / size).clamp(50, 2000));
                let row = match what {
                    "text" => text_row(dir, size, repeat)?,
                    _ => image_row(&compiler, dir, size, repeat)?,
                };
                if args.json {
                    let mut obj = serde_json::json!({"what": what, "size": size});
                    for (c, d) in cols.iter().zip(row) {
                        obj[*c] = serde_json::json!(d.as_nanos() as u64);
                    }
                    println!("{obj}");
                } else {
                    println!(
                        "{:>8} {:>14} {:>14} {:>14} {:>14}",
                        format!("{}K", size >> 10),
                        us(row[0]),
                        us(row[1]),
                        us(row[2]),
                        us(row[3])
                    );
                }
            }
        }
    }
    Ok(())
}
