//! Generated modules of the shapes that made the fresh path grow with a module's size (a Go
//! program has thousands of functions, a funcref table of thousands of elements and tens of
//! thousands of data segments; Emscripten builds import their memory and touch it from a start
//! function). `ephem bench stress-modules DIR` writes them; they are made again on demand, never
//! kept in the repository. Each exports `run` (no parameters, an `i32` result) whose value
//! [`Shape::expected`] gives, so a test can check that they run.

use std::fmt::Write as _;
use std::path::PathBuf;

#[derive(clap::Args)]
pub struct Args {
    /// Where to write the modules.
    dir: PathBuf,
    /// Scale the counts (functions, segments, table elements, pages) by this factor.
    #[arg(long, default_value_t = 1)]
    scale: u32,
}

/// One generated module.
#[derive(Clone, Copy, Debug)]
pub enum Shape {
    /// `n` functions, each named and calling the one before; `run` calls the fourth (which
    /// calls its way down to the first).
    Functions(u32),
    /// `n` active data segments of 4 bytes, 16 bytes apart; `run` sums the first byte of each
    /// of the first and last segments.
    DataSegments(u32),
    /// A funcref table of `n` elements filled by one segment, cycling over 16 functions
    /// (function `k` returns `k`); `run` calls elements 0, `n / 2` and `n - 1` indirectly.
    Table(u32),
    /// An imported memory of `n` pages whose start function writes one byte to each page;
    /// `run` sums those bytes.
    TouchedImportedMemory(u32),
}

impl Shape {
    /// Every shape at its base size, times `scale`.
    pub fn all(scale: u32) -> [Shape; 4] {
        [
            Shape::Functions(20_000 * scale),
            Shape::DataSegments(50_000 * scale),
            Shape::Table(10_000 * scale),
            Shape::TouchedImportedMemory(256 * scale),
        ]
    }

    pub fn file_name(&self) -> String {
        match self {
            Shape::Functions(n) => format!("functions-{n}.wasm"),
            Shape::DataSegments(n) => format!("data-segments-{n}.wasm"),
            Shape::Table(n) => format!("table-{n}.wasm"),
            Shape::TouchedImportedMemory(n) => format!("touched-imported-memory-{n}.wasm"),
        }
    }

    /// What `run` returns.
    pub fn expected(&self) -> i32 {
        match *self {
            Shape::Functions(_) => 7,
            // Segment k holds the bytes k, k+1, k+2, k+3 (mod 256).
            Shape::DataSegments(n) => ((n - 1) % 256) as i32,
            Shape::Table(n) => ((n / 2) % 16 + (n - 1) % 16) as i32,
            Shape::TouchedImportedMemory(n) => n as i32,
        }
    }

    /// The module in the text format.
    pub fn wat(&self) -> String {
        let mut w = String::from("(module\n");
        match *self {
            Shape::Functions(n) => {
                w += "(func $f0 (result i32) i32.const 7)\n";
                for i in 1..n {
                    let _ = writeln!(w, "(func $f{i} (result i32) call $f{})", i - 1);
                }
                // Down a short stretch of the chain (all of it could overflow the stack).
                w += "(func (export \"run\") (result i32) call $f3)\n";
            }
            Shape::DataSegments(n) => {
                let pages = (u64::from(n) * 16).div_ceil(65536).max(1);
                let _ = writeln!(w, "(memory {pages})");
                for k in 0..n {
                    let b = |i: u32| (k + i) % 256;
                    let _ = writeln!(
                        w,
                        "(data (i32.const {}) \"\\{:02x}\\{:02x}\\{:02x}\\{:02x}\")",
                        k * 16,
                        b(0),
                        b(1),
                        b(2),
                        b(3)
                    );
                }
                let _ = writeln!(
                    w,
                    "(func (export \"run\") (result i32) (i32.add (i32.load8_u (i32.const 0)) (i32.load8_u (i32.const {}))))",
                    (n - 1) * 16
                );
            }
            Shape::Table(n) => {
                let _ = writeln!(w, "(type $t (func (result i32)))\n(table {n} funcref)");
                for k in 0..16 {
                    let _ = writeln!(w, "(func $g{k} (result i32) i32.const {k})");
                }
                w += "(elem (i32.const 0) func";
                for i in 0..n {
                    let _ = write!(w, " $g{}", i % 16);
                }
                w += ")\n";
                let call = |i: u32| format!("(call_indirect (type $t) (i32.const {i}))");
                let _ = writeln!(
                    w,
                    "(func (export \"run\") (result i32) (i32.add {} (i32.add {} {})))",
                    call(0),
                    call(n / 2),
                    call(n - 1)
                );
            }
            Shape::TouchedImportedMemory(n) => {
                let _ = writeln!(
                    w,
                    "(import \"env\" \"memory\" (memory {n}))
(func $touch (local $p i32)
  (loop $l
    (i32.store8 (i32.mul (local.get $p) (i32.const 65536)) (i32.const 1))
    (local.set $p (i32.add (local.get $p) (i32.const 1)))
    (br_if $l (i32.lt_u (local.get $p) (i32.const {n})))))
(start $touch)
(func (export \"run\") (result i32) (local $p i32) (local $sum i32)
  (loop $l
    (local.set $sum (i32.add (local.get $sum) (i32.load8_u (i32.mul (local.get $p) (i32.const 65536)))))
    (local.set $p (i32.add (local.get $p) (i32.const 1)))
    (br_if $l (i32.lt_u (local.get $p) (i32.const {n}))))
  (local.get $sum))"
                );
            }
        }
        w += ")\n";
        w
    }
}

pub fn run(args: Args) -> anyhow::Result<()> {
    std::fs::create_dir_all(&args.dir)?;
    for shape in Shape::all(args.scale) {
        let path = args.dir.join(shape.file_name());
        std::fs::write(&path, wat::parse_str(shape.wat())?)?;
        println!("{}", path.display());
    }
    Ok(())
}
