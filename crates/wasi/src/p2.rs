//! WASI 0.2 for components: `wasi:cli` (arguments, environment, exit, standard streams,
//! terminals), `wasi:io` (streams, errors, polling), `wasi:clocks`, `wasi:random`,
//! `wasi:filesystem` ([`fs`]) and `wasi:http` ([`http`]), over the same [`WasiCtx`] as
//! preview 1 (one template, one context per invocation, no system call to make one).
//!
//! Streams 0, 1 and 2 are the standard ones; others (files, HTTP bodies) are slots of the
//! context's stream table past them. Pollables, streams, listings and HTTP objects are kept in
//! the context (`State`), dropped with it. Every host function takes only handles of its own
//! resource types. What is not here yet: sockets, and parts of `wasi:filesystem` (see [`fs`]);
//! `ephem run` makes what is missing trap when called, naming itself.

use ephem_component::{Linker, ResourceAny, ResourceType, Val};
use ephem_runtime::{HostError, StoreContextMut};

use crate::I32Exit;
use crate::ctx::WasiCtx;
use crate::host::{fill_random, nanos, read_bytes, read_stdin, timespec, write_stdio};

pub mod fs;
pub mod http;

/// The WASI 0.2 version these interfaces are defined under; a component importing any other
/// 0.2.x finds them too (the linker matches compatible versions).
pub const VERSION: &str = "0.2.0";

/// The type of standard streams and pollables in the linker.
pub struct InputStream;
/// See [`InputStream`].
pub struct OutputStream;
/// See [`InputStream`].
pub struct Pollable;
/// `wasi:io/error`'s resource: ephem's streams never fail with one, so none is ever made.
pub struct IoError;
/// `wasi:cli`'s terminals: none is ever given (standard streams are not reported as ttys).
pub struct Terminal;

/// A context's WASI 0.2 state: pollables, the streams other than the standard three, and
/// `wasi:http`'s resources. Empty (nothing allocated) until a component asks for one.
#[derive(Default)]
pub(crate) struct State {
    pub pollables: Table<Wait>,
    pub streams: Table<Stream>,
    pub listings: fs::Listings,
    /// Streams of files open (each holds a host descriptor of its own).
    pub file_streams: usize,
    pub http: http::State,
}

/// Objects of one resource type, by rep: slots, and the free ones to reuse.
pub(crate) struct Table<T> {
    slots: Vec<Option<T>>,
    free: Vec<u32>,
}

impl<T> Default for Table<T> {
    fn default() -> Self {
        Table {
            slots: Vec::new(),
            free: Vec::new(),
        }
    }
}

/// The most objects of one resource type a context holds at once.
const MAX_OBJECTS: usize = 1 << 16;

impl<T> Table<T> {
    /// Adds `value`, giving its rep.
    pub fn push(&mut self, value: T) -> Result<u32, HostError> {
        match self.free.pop() {
            Some(rep) => {
                self.slots[rep as usize] = Some(value);
                Ok(rep)
            }
            None if self.slots.len() < MAX_OBJECTS => {
                self.slots.push(Some(value));
                Ok(self.slots.len() as u32 - 1)
            }
            None => Err(format!(
                "more than {MAX_OBJECTS} WASI objects of one kind (pollables, streams, fields…) at once"
            )
            .into()),
        }
    }

    pub fn get(&self, rep: u32) -> Result<&T, HostError> {
        let slot = self.slots.get(rep as usize).and_then(Option::as_ref);
        slot.ok_or_else(|| "no such resource".into())
    }

    pub fn get_mut(&mut self, rep: u32) -> Result<&mut T, HostError> {
        let slot = self.slots.get_mut(rep as usize).and_then(Option::as_mut);
        slot.ok_or_else(|| "no such resource".into())
    }

    /// How many objects it holds.
    pub fn live(&self) -> usize {
        self.slots.len() - self.free.len()
    }

    /// Takes the object away, freeing its rep.
    pub fn take(&mut self, rep: u32) -> Result<T, HostError> {
        let slot = self.slots.get_mut(rep as usize).and_then(Option::take);
        let value = slot.ok_or("no such resource")?;
        self.free.push(rep);
        Ok(value)
    }
}

/// A stream other than the standard three (reps 0, 1, 2): rep `3 + n` is slot `n`.
pub(crate) enum Stream {
    /// Bytes to read (an incoming HTTP body), from `at`.
    In {
        data: std::sync::Arc<[u8]>,
        at: usize,
    },
    /// Writes to outgoing HTTP body `n` (`http::State`'s rep).
    Out(u32),
    /// Reads or writes a file from `at` on (at its end, with `append`).
    File {
        file: std::os::fd::OwnedFd,
        at: u64,
        append: bool,
    },
}

/// Reps of the standard streams; the others are [`State::streams`]' slots past them.
const STDIO_REPS: u32 = 3;

/// The most bytes one call reads, writes as zeroes, or draws at random: past it the call
/// fails rather than do less than asked.
const MAX_BYTES: u64 = 1 << 20;

/// What a pollable waits for.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Wait {
    /// Ready now (a standard stream: in-memory, or written as it comes).
    Ready,
    /// Ready at this monotonic-clock time (nanoseconds).
    Until(u64),
}

/// A host function of this module's shape.
type HostResult = Result<(), HostError>;

fn name(iface: &str) -> String {
    format!("wasi:{iface}@{VERSION}")
}

fn monotonic_now() -> u64 {
    nanos(rustix::time::clock_gettime(
        rustix::time::ClockId::Monotonic,
    ))
}

/// Parameter `i`: a component may import these functions at any type, so nothing is taken for
/// granted of its parameters.
fn arg(p: &[Val], i: usize) -> Result<&Val, HostError> {
    p.get(i)
        .ok_or_else(|| format!("a parameter {i} this function's WASI type has").into())
}

/// Sets the result, where the import's type has one.
fn set(r: &mut [Val], v: Val) -> HostResult {
    match r.first_mut() {
        Some(slot) => {
            *slot = v;
            Ok(())
        }
        None => Err("imported without the result its WASI type has".into()),
    }
}

/// `n`, if it is at most [`MAX_BYTES`].
fn at_most(n: u64) -> Result<usize, HostError> {
    if n > MAX_BYTES {
        return Err(
            format!("{n} bytes asked for in one call; ephem gives at most {MAX_BYTES}").into(),
        );
    }
    Ok(n as usize)
}

/// The rep of a handle of host resource type `R`. A component may import WASI's functions at
/// types where another resource stands for `R`: it gets an error, not another object of `R`
/// whose rep happens to match.
fn rep_of<R: 'static>(v: &Val) -> Result<u32, HostError> {
    match v {
        Val::Resource(r) if r.ty() == ResourceType::host::<R>() => Ok(r.rep()),
        Val::Resource(_) => Err("a handle of another resource type than WASI's".into()),
        other => Err(format!("a resource handle expected, not {other:?}").into()),
    }
}

fn u64_arg(v: &Val) -> Result<u64, HostError> {
    match v {
        Val::U64(n) => Ok(*n),
        other => Err(format!("a u64 expected, not {other:?}").into()),
    }
}

fn ok(v: Option<Val>) -> Val {
    Val::Result(Ok(v.map(Box::new)))
}

/// `stream-error.closed`.
fn closed() -> Val {
    Val::Result(Err(Some(Box::new(Val::Variant("closed".into(), None)))))
}

fn bytes(v: &Val) -> Result<Vec<u8>, HostError> {
    match v {
        Val::List(items) => items
            .iter()
            .map(|b| match b {
                Val::U8(b) => Ok(*b),
                other => Err(format!("a byte expected, not {other:?}").into()),
            })
            .collect(),
        other => Err(format!("a list of bytes expected, not {other:?}").into()),
    }
}

fn list_of_bytes(data: &[u8]) -> Val {
    Val::List(data.iter().map(|&b| Val::U8(b)).collect())
}

fn strings(s: &crate::ctx::Strings) -> impl Iterator<Item = String> + '_ {
    (s.bytes.split(|&b| b == 0))
        .take(s.count)
        .map(|b| String::from_utf8_lossy(b).into_owned())
}

/// Adds WASI 0.2's `wasi:cli`, `wasi:io`, `wasi:clocks` and `wasi:random` to `linker`, with
/// each store's context found by `get`.
pub fn add_to_linker<T: 'static>(
    linker: &mut Linker<T>,
    get: fn(&mut T) -> &mut WasiCtx,
) -> Result<(), ephem_component::Error> {
    io(linker, get)?;
    cli(linker, get)?;
    clocks(linker, get)?;
    random(linker)?;
    Ok(())
}

fn io<T: 'static>(
    linker: &mut Linker<T>,
    get: fn(&mut T) -> &mut WasiCtx,
) -> Result<(), ephem_component::Error> {
    let mut error = linker.instance(&name("io/error"))?;
    error.resource("error", ResourceType::host::<IoError>(), |_, _| Ok(()))?;
    error.func_new("[method]error.to-debug-string", |_, _, _, r| {
        set(r, Val::String("an I/O error".into()))?;
        Ok(())
    })?;

    let mut poll = linker.instance(&name("io/poll"))?;
    poll.resource(
        "pollable",
        ResourceType::host::<Pollable>(),
        move |mut s: StoreContextMut<'_, T>, rep| drop_pollable(get(s.data_mut()), rep),
    )?;
    poll.func_new(
        "[method]pollable.ready",
        move |mut s: StoreContextMut<'_, T>, _, p, r| {
            let wait = pollable(get(s.data_mut()), rep_of::<Pollable>(arg(p, 0)?)?)?;
            set(
                r,
                Val::Bool(match wait {
                    Wait::Ready => true,
                    Wait::Until(at) => monotonic_now() >= at,
                }),
            )?;
            Ok(())
        },
    )?;
    poll.func_new(
        "[method]pollable.block",
        move |mut s: StoreContextMut<'_, T>, _, p, _| {
            let wait = pollable(get(s.data_mut()), rep_of::<Pollable>(arg(p, 0)?)?)?;
            block(&[wait]);
            Ok(())
        },
    )?;
    poll.func_new("poll", move |mut s: StoreContextMut<'_, T>, _, p, r| {
        let Val::List(list) = arg(p, 0)? else {
            return Err("a list of pollables expected".into());
        };
        if list.is_empty() {
            return Err("`poll` of no pollables".into());
        }
        let ctx = get(s.data_mut());
        let waits = (list.iter())
            .map(|v| pollable(ctx, rep_of::<Pollable>(v)?))
            .collect::<Result<Vec<_>, _>>()?;
        block(&waits);
        let now = monotonic_now();
        let ready = (waits.iter().enumerate())
            .filter(|(_, w)| matches!(w, Wait::Ready) || matches!(w, Wait::Until(at) if now >= *at))
            .map(|(i, _)| Val::U32(i as u32))
            .collect();
        set(r, Val::List(ready))?;
        Ok(())
    })?;

    let mut streams = linker.instance(&name("io/streams"))?;
    let drop_stream = move |mut s: StoreContextMut<'_, T>, rep: u32| -> HostResult {
        match rep.checked_sub(STDIO_REPS) {
            None => Ok(()),
            Some(n) => {
                let p2 = &mut get(s.data_mut()).p2;
                if let Stream::File { .. } = p2.streams.take(n)? {
                    p2.file_streams -= 1;
                }
                Ok(())
            }
        }
    };
    streams.resource(
        "input-stream",
        ResourceType::host::<InputStream>(),
        drop_stream,
    )?;
    streams.resource(
        "output-stream",
        ResourceType::host::<OutputStream>(),
        drop_stream,
    )?;
    // Reading and skipping: the same read, giving the bytes or their count.
    for (method, skip) in [
        ("read", false),
        ("blocking-read", false),
        ("skip", true),
        ("blocking-skip", true),
    ] {
        streams.func_new(
            &format!("[method]input-stream.{method}"),
            move |mut s: StoreContextMut<'_, T>, _, p, r| {
                let len = u64_arg(arg(p, 1)?)?.min(64 << 10) as usize;
                let mut buf = vec![0; len];
                let result = match input(
                    get(s.data_mut()),
                    rep_of::<InputStream>(arg(p, 0)?)?,
                    &mut buf,
                )? {
                    Ok(0) if len > 0 => closed(),
                    Ok(n) if skip => ok(Some(Val::U64(n as u64))),
                    Ok(n) => ok(Some(list_of_bytes(&buf[..n]))),
                    Err(_) => closed(),
                };
                set(r, result)
            },
        )?;
    }
    for stream in ["input-stream", "output-stream"] {
        streams.func_new(
            &format!("[method]{stream}.subscribe"),
            move |mut s: StoreContextMut<'_, T>, _, _, r| {
                set(r, new_pollable(get(s.data_mut()), Wait::Ready)?)?;
                Ok(())
            },
        )?;
    }
    streams.func_new("[method]output-stream.check-write", |_, _, _, r| {
        set(r, ok(Some(Val::U64(MAX_BYTES))))?;
        Ok(())
    })?;
    // Writing bytes, or as many zeroes as asked for.
    for (method, zeroes) in [
        ("write", false),
        ("blocking-write-and-flush", false),
        ("write-zeroes", true),
        ("blocking-write-zeroes-and-flush", true),
    ] {
        streams.func_new(
            &format!("[method]output-stream.{method}"),
            move |mut s: StoreContextMut<'_, T>, _, p, r| {
                let data = match zeroes {
                    true => vec![0; at_most(u64_arg(arg(p, 1)?)?)?],
                    false => bytes(arg(p, 1)?)?,
                };
                let stream = rep_of::<OutputStream>(arg(p, 0)?)?;
                set(r, output(get(s.data_mut()), stream, &data)?)
            },
        )?;
    }
    for flush in ["flush", "blocking-flush"] {
        streams.func_new(&format!("[method]output-stream.{flush}"), |_, _, _, r| {
            set(r, ok(None))?;
            Ok(())
        })?;
    }
    Ok(())
}

/// Reads from standard input (rep 0) or an incoming body into `buf`: how many bytes, 0 at the
/// end, or the error that closed the stream.
fn input(ctx: &mut WasiCtx, rep: u32, buf: &mut [u8]) -> Result<Result<usize, ()>, HostError> {
    let n = match rep.checked_sub(STDIO_REPS) {
        None if rep == 0 => return Ok(read_stdin(ctx, buf).map_err(drop)),
        None => return Err("an output stream read from".into()),
        Some(n) => n,
    };
    match ctx.p2.streams.get_mut(n)? {
        Stream::In { data, at } => Ok(Ok(read_bytes(data, at, buf))),
        Stream::File { file, at, .. } => {
            let read = fs::pread(std::os::fd::AsFd::as_fd(file), buf, *at);
            if let Ok(n) = read {
                *at += n as u64;
            }
            Ok(read.map_err(drop))
        }
        Stream::Out(_) => Err("an output stream read from".into()),
    }
}

/// Writes to standard output (rep 1), error (rep 2) or an outgoing body: the result `write`
/// gives.
fn output(ctx: &mut WasiCtx, rep: u32, data: &[u8]) -> Result<Val, HostError> {
    if data.len() as u64 > MAX_BYTES {
        return Err(
            format!("a write of more than the {MAX_BYTES} bytes `check-write` permits").into(),
        );
    }
    let written = match rep {
        1 | 2 => write_stdio(ctx, rep == 2, data),
        0 => return Err("an input stream written to".into()),
        _ => {
            let n = rep - STDIO_REPS;
            if let Stream::Out(body) = ctx.p2.streams.get(n)? {
                let body = *body;
                return Ok(match http::write(ctx, body, data) {
                    true => ok(None),
                    false => closed(),
                });
            }
            match ctx.p2.streams.get_mut(n)? {
                Stream::File { file, at, append } => {
                    let written = fs::pwrite(std::os::fd::AsFd::as_fd(file), data, *at, *append);
                    if let Ok(n) = written {
                        *at += n as u64;
                    }
                    written
                }
                _ => return Err("an input stream written to".into()),
            }
        }
    };
    Ok(match written {
        Ok(n) if n == data.len() => ok(None),
        _ => closed(),
    })
}

/// A new stream, as the owned handle a function returns.
pub(crate) fn new_stream<R: 'static>(ctx: &mut WasiCtx, stream: Stream) -> Result<Val, HostError> {
    let n = ctx.p2.streams.push(stream)?;
    Ok(own::<R>(n + STDIO_REPS))
}

fn pollable(ctx: &mut WasiCtx, rep: u32) -> Result<Wait, HostError> {
    ctx.p2.pollables.get(rep).copied()
}

/// A new pollable, as the owned handle a function returns.
pub(crate) fn new_pollable(ctx: &mut WasiCtx, wait: Wait) -> Result<Val, HostError> {
    let rep = ctx.p2.pollables.push(wait)?;
    Ok(own::<Pollable>(rep))
}

fn drop_pollable(ctx: &mut WasiCtx, rep: u32) -> HostResult {
    ctx.p2.pollables.take(rep).map(drop)
}

/// An owned handle to host resource `R`'s `rep`.
pub(crate) fn own<R: 'static>(rep: u32) -> Val {
    Val::Resource(ResourceAny::new(ResourceType::host::<R>(), rep, true))
}

/// Waits until the first of `waits` is ready (standard streams always are). One sleep: cut
/// short by a signal (the runtime's interrupt, when the deadline passed), it returns early,
/// and the guest stops as it goes back to wasm.
fn block(waits: &[Wait]) {
    let soonest = waits.iter().map(|w| match w {
        Wait::Ready => 0,
        Wait::Until(at) => *at,
    });
    let at = soonest.min().unwrap_or(0);
    let now = monotonic_now();
    if at > now {
        let _ = rustix::thread::nanosleep(&timespec(at - now));
    }
}

fn cli<T: 'static>(
    linker: &mut Linker<T>,
    get: fn(&mut T) -> &mut WasiCtx,
) -> Result<(), ephem_component::Error> {
    let mut env = linker.instance(&name("cli/environment"))?;
    env.func_new(
        "get-environment",
        move |mut s: StoreContextMut<'_, T>, _, _, r| {
            let ctx = get(s.data_mut());
            let vars = strings(&ctx.fixed.env)
                .map(|kv| {
                    let (k, v) = kv.split_once('=').unwrap_or((&kv, ""));
                    Val::Tuple(vec![Val::String(k.into()), Val::String(v.into())])
                })
                .collect();
            set(r, Val::List(vars))?;
            Ok(())
        },
    )?;
    env.func_new(
        "get-arguments",
        move |mut s: StoreContextMut<'_, T>, _, _, r| {
            let ctx = get(s.data_mut());
            set(
                r,
                Val::List(strings(&ctx.fixed.args).map(Val::String).collect()),
            )?;
            Ok(())
        },
    )?;
    env.func_new("initial-cwd", |_, _, _, r| {
        set(r, Val::Option(None))?;
        Ok(())
    })?;

    let mut exit = linker.instance(&name("cli/exit"))?;
    exit.func_new("exit", |_, _, p, _| -> HostResult {
        let code = match arg(p, 0)? {
            Val::Result(Ok(_)) => 0,
            _ => 1,
        };
        Err(Box::new(I32Exit(code)))
    })?;

    for (iface, func, stream, rep) in [
        ("cli/stdin", "get-stdin", "input", 0),
        ("cli/stdout", "get-stdout", "output", 1),
        ("cli/stderr", "get-stderr", "output", 2),
    ] {
        let ty = if stream == "input" {
            ResourceType::host::<InputStream>()
        } else {
            ResourceType::host::<OutputStream>()
        };
        linker
            .instance(&name(iface))?
            .func_new(func, move |_, _, _, r| {
                set(r, Val::Resource(ResourceAny::new(ty, rep, true)))?;
                Ok(())
            })?;
    }
    let terminal = |_: StoreContextMut<'_, T>, _: u32| -> HostResult { Ok(()) };
    linker.instance(&name("cli/terminal-input"))?.resource(
        "terminal-input",
        ResourceType::host::<Terminal>(),
        terminal,
    )?;
    linker.instance(&name("cli/terminal-output"))?.resource(
        "terminal-output",
        ResourceType::host::<Terminal>(),
        terminal,
    )?;
    for (iface, func) in [
        ("cli/terminal-stdin", "get-terminal-stdin"),
        ("cli/terminal-stdout", "get-terminal-stdout"),
        ("cli/terminal-stderr", "get-terminal-stderr"),
    ] {
        linker
            .instance(&name(iface))?
            .func_new(func, |_, _, _, r| {
                set(r, Val::Option(None))?;
                Ok(())
            })?;
    }
    Ok(())
}

fn clocks<T: 'static>(
    linker: &mut Linker<T>,
    get: fn(&mut T) -> &mut WasiCtx,
) -> Result<(), ephem_component::Error> {
    let mut mono = linker.instance(&name("clocks/monotonic-clock"))?;
    mono.func_new("now", |_, _, _, r| {
        set(r, Val::U64(monotonic_now()))?;
        Ok(())
    })?;
    mono.func_new("resolution", |_, _, _, r| {
        set(r, Val::U64(1))?;
        Ok(())
    })?;
    mono.func_new(
        "subscribe-instant",
        move |mut s: StoreContextMut<'_, T>, _, p, r| {
            let at = u64_arg(arg(p, 0)?)?;
            set(r, new_pollable(get(s.data_mut()), Wait::Until(at))?)?;
            Ok(())
        },
    )?;
    mono.func_new(
        "subscribe-duration",
        move |mut s: StoreContextMut<'_, T>, _, p, r| {
            let at = monotonic_now().saturating_add(u64_arg(arg(p, 0)?)?);
            set(r, new_pollable(get(s.data_mut()), Wait::Until(at))?)?;
            Ok(())
        },
    )?;
    let mut wall = linker.instance(&name("clocks/wall-clock"))?;
    let datetime = |seconds: u64, nanoseconds: u32| {
        Val::Record(vec![
            ("seconds".into(), Val::U64(seconds)),
            ("nanoseconds".into(), Val::U32(nanoseconds)),
        ])
    };
    wall.func_new("now", move |_, _, _, r| {
        let t = rustix::time::clock_gettime(rustix::time::ClockId::Realtime);
        set(r, datetime(t.tv_sec as u64, t.tv_nsec as u32))?;
        Ok(())
    })?;
    wall.func_new("resolution", move |_, _, _, r| {
        set(r, datetime(0, 1))?;
        Ok(())
    })?;
    Ok(())
}

fn random<T: 'static>(linker: &mut Linker<T>) -> Result<(), ephem_component::Error> {
    fn fill(buf: &mut [u8]) -> Result<(), HostError> {
        fill_random(buf)
            .map_err(|e| format!("the kernel gave no random bytes (errno {})", e.0).into())
    }
    for (iface, prefix) in [("random/random", ""), ("random/insecure", "insecure-")] {
        let mut r = linker.instance(&name(iface))?;
        r.func_new(&format!("get-{prefix}random-bytes"), |_, _, p, r| {
            let mut buf = vec![0; at_most(u64_arg(arg(p, 0)?)?)?];
            fill(&mut buf)?;
            set(r, list_of_bytes(&buf))?;
            Ok(())
        })?;
        r.func_new(&format!("get-{prefix}random-u64"), |_, _, _, r| {
            let mut buf = [0; 8];
            fill(&mut buf)?;
            set(r, Val::U64(u64::from_le_bytes(buf)))?;
            Ok(())
        })?;
    }
    let mut seed = linker.instance(&name("random/insecure-seed"))?;
    seed.func_new("insecure-seed", |_, _, _, r| {
        let mut buf = [0; 16];
        fill(&mut buf)?;
        let (a, b) = buf.split_at(8);
        set(
            r,
            Val::Tuple(vec![
                Val::U64(u64::from_le_bytes(a.try_into().expect("8"))),
                Val::U64(u64::from_le_bytes(b.try_into().expect("8"))),
            ]),
        )?;
        Ok(())
    })?;
    Ok(())
}

/// Adds `wasi:filesystem` (see [`fs`]) to `linker`, with each store's context found by
/// `get`: the context's preopened directories, in the same sandbox as preview 1's.
pub fn add_filesystem_to_linker<T: 'static>(
    linker: &mut Linker<T>,
    get: fn(&mut T) -> &mut WasiCtx,
) -> Result<(), ephem_component::Error> {
    fs::add_to_linker(linker, get)
}
