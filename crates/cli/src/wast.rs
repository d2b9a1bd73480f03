//! `ephem wast FILE|DIR…`: runs spec-test scripts, a line per file, then the totals.

use std::path::PathBuf;

use anyhow::Context;
use ephem::wast::{Loading, Outcome};

#[derive(clap::Args)]
pub struct Args {
    /// .wast files, or directories whose .wast files are run (sorted by name).
    #[arg(required = true)]
    paths: Vec<PathBuf>,
    /// Also print every skipped assertion with its line (failures always are).
    #[arg(long, short)]
    verbose: bool,
    /// Load each module into a code slot that just held another module.
    #[arg(long)]
    reuse_slots: bool,
    /// Accept exactly WebAssembly 2.0, none of the 3.0 proposals ephem implements (the
    /// `wasm-v2` suite expects some such modules to be refused).
    #[arg(long, conflicts_with = "without")]
    wasm2_only: bool,
    /// Turn these proposals off (comma-separated): a proposal's own suite may predate another
    /// (`proposals/function-references` expects multi-memory's encodings to be malformed:
    /// `--without multi-memory`).
    #[arg(long, value_enum, value_delimiter = ',')]
    without: Vec<Proposal>,
}

/// The WebAssembly 3.0 proposals ephem implements, as the suite's directories name them.
#[derive(Clone, Copy, clap::ValueEnum)]
enum Proposal {
    TailCall,
    ExtendedConst,
    MultiMemory,
    RelaxedSimd,
    FunctionReferences,
    WideArithmetic,
    Exceptions,
    CustomPageSizes,
    Memory64,
    Threads,
    /// WebAssembly 2.0's, which only suites written before it turn off.
    ReferenceTypes,
}

impl Proposal {
    fn turn_off(self, p: &mut ephem::Proposals) {
        let on = match self {
            Proposal::TailCall => &mut p.tail_call,
            Proposal::ExtendedConst => &mut p.extended_const,
            Proposal::MultiMemory => &mut p.multi_memory,
            Proposal::RelaxedSimd => &mut p.relaxed_simd,
            Proposal::FunctionReferences => &mut p.function_references,
            Proposal::WideArithmetic => &mut p.wide_arithmetic,
            Proposal::Exceptions => &mut p.exceptions,
            Proposal::CustomPageSizes => &mut p.custom_page_sizes,
            Proposal::Memory64 => &mut p.memory64,
            Proposal::Threads => &mut p.threads,
            Proposal::ReferenceTypes => &mut p.reference_types,
        };
        *on = false;
    }
}

pub fn run(args: Args) -> anyhow::Result<()> {
    let mut files = Vec::new();
    for path in &args.paths {
        if path.is_dir() {
            let mut found: Vec<PathBuf> = std::fs::read_dir(path)
                .with_context(|| format!("reading {}", path.display()))?
                .filter_map(|e| e.ok().map(|e| e.path()))
                .filter(|p| p.extension().is_some_and(|e| e == "wast"))
                .collect();
            found.sort();
            files.extend(found);
        } else {
            files.push(path.clone());
        }
    }
    let engine = ephem::Engine::default();
    let mut proposals = if args.wasm2_only {
        ephem::Proposals::NONE
    } else {
        ephem::Proposals::ALL
    };
    for p in &args.without {
        p.turn_off(&mut proposals);
    }
    let compiler = ephem::Compiler::new()?.with_proposals(proposals);
    let reuse = if args.reuse_slots {
        Loading::AfterOther
    } else {
        Loading::Normal
    };
    let mut total = Outcome::default();
    // A reader that stopped reading does not stop the run: failures still fail the command.
    let mut closed: Option<std::io::Error> = None;
    let mut say = |line: std::fmt::Arguments<'_>| {
        if closed.is_none()
            && let Err(e) = outln!("{line}")
        {
            closed = Some(e);
        }
    };
    for file in &files {
        let text =
            std::fs::read_to_string(file).with_context(|| format!("reading {}", file.display()))?;
        let outcome = ephem::wast::run(
            &compiler,
            &engine,
            &file.display().to_string(),
            &text,
            reuse,
        );
        say(format_args!(
            "{}: {} passed, {} failed, {} skipped",
            file.display(),
            outcome.passed,
            outcome.failed,
            outcome.skipped
        ));
        // Failures always say why; skips only when asked.
        for note in &outcome.notes {
            if args.verbose || !note.starts_with("skipped:") {
                say(format_args!("  {note}"));
            }
        }
        total.add(&outcome);
    }
    say(format_args!(
        "spec: {} passed, {} failed, {} skipped",
        total.passed, total.failed, total.skipped
    ));
    if total.failed > 0 {
        std::process::exit(1);
    }
    closed.map_or(Ok(()), |e| Err(e.into()))
}
