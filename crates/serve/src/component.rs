//! `wasi:http/proxy` components served: `ephem serve --component FILE`, one component answering
//! every request as `wasmtime serve FILE` does, and components uploaded to the server (see
//! `http`), each request in a fresh instance.
//!
//! A request's body is read whole (up to the server's `max_input`) and handed to the
//! component's `wasi:http/incoming-handler` on a worker, under the server's limits (fuel,
//! deadline, memory), its gate (`503` when the workers and the queue are full, before the body
//! is read) and its token (which the component does not see). The response streams back as the
//! component writes it: the status and headers with the body's first bytes (one write, not
//! two), then the body chunk by chunk through a bounded channel, so a component writing faster
//! than the client reads waits (back-pressure, up to its deadline) instead of filling memory. A component
//! that fails before it answers (a trap, a limit, no response set) gets `500` with the reason
//! in JSON; one that fails after the head was sent has its response cut short, the connection
//! closed before the body's end, so that no client takes it for whole (`wasmtime serve` 49
//! ends such a body as if it were complete).
//!
//! With `--component`, every path goes to the component: `/healthz` and `/metrics` are not
//! served in that mode.

use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use axum::body::Bytes;
use axum::extract::{Request, State};
use axum::http::{HeaderName, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use ephem::component::{self as ec, Component};
use ephem::{Engine, Store, StoreLimits, StoreLimitsBuilder};
use ephem_wasi::p2::http::{Handled, Head, Proxy, Request as WasiRequest, Responder};
use ephem_wasi::{Output, WasiCtx};
use tokio::sync::{OwnedSemaphorePermit, mpsc, oneshot};

use crate::exec::{CallError, TICK};
use crate::http::{ApiError, Shared, start_on_worker};

/// What a component's store holds.
pub struct Host {
    wasi: WasiCtx,
    limits: StoreLimits,
}

fn wasi_of(host: &mut Host) -> &mut WasiCtx {
    &mut host.wasi
}

/// The component served, linked and ready to instantiate per request.
pub struct Handler {
    engine: Engine,
    pre: ec::InstancePre<Host>,
    proxy: Proxy,
    wasi: ephem_wasi::WasiCtxBuilder,
}

/// The most memories, tables and table elements of one request's component instance.
const MAX_MEMORIES: usize = 16;
const MAX_TABLES: usize = 64;
const MAX_TABLE_ELEMENTS: usize = 1 << 20;

/// How many body chunks wait between the component and the connection.
const CHUNKS_IN_FLIGHT: usize = 8;

impl Handler {
    /// Compiles (through `cache`) and links the component in `bytes`; refuses one that is not
    /// a `wasi:http` handler, or imports what the server does not provide, saying why.
    pub fn new(
        engine: &Engine,
        compiler: &ephem::Compiler,
        cache: &ephem::Cache,
        bytes: &[u8],
    ) -> anyhow::Result<Handler> {
        let component = Component::new_with(engine, bytes, compiler, |compiler, wasm| {
            ephem::compile_cached(compiler, engine, cache, wasm).map(|(m, _)| m)
        })?;
        // What the component prints goes where the server's own output goes, as with
        // `wasmtime serve`.
        Handler::from_component(engine, &component, Output::Inherit)
            .map_err(|why| anyhow::anyhow!("the component cannot be served: {why}"))
    }

    /// `component` linked to the server's WASI, its standard output and error going to
    /// `output`; or why it cannot be served (no handler, imports the server lacks).
    pub fn from_component(
        engine: &Engine,
        component: &Component,
        output: Output,
    ) -> Result<Handler, String> {
        let proxy = Proxy::new(component)?;
        let mut linker = ec::Linker::new(engine);
        let linked = (|| {
            ephem_wasi::p2::add_to_linker(&mut linker, wasi_of)?;
            ephem_wasi::p2::http::add_to_linker(&mut linker, wasi_of)?;
            ephem_wasi::p2::add_filesystem_to_linker(&mut linker, wasi_of)?;
            // What the server does not provide of WASI traps when called, naming itself.
            linker.define_unknown_imports_as_traps(component, |name| name.starts_with("`wasi:"))?;
            linker.instantiate_pre(component)
        })();
        let pre = linked.map_err(|e| format!("linking it: {e}"))?;
        let mut wasi = WasiCtx::builder();
        wasi.stdout(output).stderr(output);
        Ok(Handler {
            engine: engine.clone(),
            pre,
            proxy,
            wasi,
        })
    }

    /// Handles `request` in a fresh instance bounded by `limits`; the response goes to
    /// `responder`.
    fn call(
        &self,
        request: WasiRequest,
        responder: ChannelResponder,
        limits: &crate::Limits,
    ) -> Result<Handled, ec::Error> {
        let memory = usize::try_from(limits.max_memory).unwrap_or(usize::MAX);
        let host = Host {
            wasi: self.wasi.build(),
            // `max_memory` bounds each memory; a component has several, so their number is
            // bounded too (real ones have a few: a language runtime's, libc's, an adapter's),
            // and so are tables and their elements.
            limits: StoreLimitsBuilder::new()
                .memory_size(memory)
                .memories(MAX_MEMORIES)
                .tables(MAX_TABLES)
                .table_elements(MAX_TABLE_ELEMENTS)
                .build(),
        };
        let mut store = Store::new(&self.engine, host);
        store.limiter(|h| &mut h.limits);
        store.set_fuel(limits.fuel).map_err(ec::Error::Runtime)?;
        let tick = TICK.as_millis() as u64;
        store.set_epoch_deadline(limits.timeout_ms.div_ceil(tick) + 1);
        let instance = self.pre.instantiate(&mut store)?;
        (self.proxy).handle(&mut store, &instance, wasi_of, request, Box::new(responder))
    }
}

/// What the connection's task waits for: the head, or why there is none.
type First = Result<Head, ApiError>;

/// Where the one [`First`] of a request goes: the responder sends the head, the worker the
/// failure if no head was sent when the call ended.
type FirstSlot = Arc<Mutex<Option<oneshot::Sender<First>>>>;

fn send_first(slot: &FirstSlot, first: impl FnOnce() -> First) -> bool {
    let tx = slot.lock().unwrap_or_else(|e| e.into_inner()).take();
    tx.is_some_and(|tx| tx.send(first()).is_ok())
}

/// Passes the response to the connection: the head as the request's [`First`], the body
/// through a bounded channel, and whether it ended through a flag the body's stream reads when
/// the channel closes (a body that did not end is cut short, not ended as if whole).
struct ChannelResponder {
    first: FirstSlot,
    /// The head, until the body's first bytes or its end.
    waiting: Option<Head>,
    /// The call's admission (see [`crate::http::Place::take_admission`]), given back before
    /// the response's last byte goes: its end, or the byte its `content-length` ends at.
    admission: Option<OwnedSemaphorePermit>,
    content_length: Option<u64>,
    sent: u64,
    /// The body's channel, until its end (dropped there, the response ends).
    body: Option<mpsc::Sender<Bytes>>,
    ended: Arc<AtomicBool>,
    /// A chunk could not be sent: the response is cut whatever follows.
    cut: bool,
    /// When the call's time is up, and the runtime whose timers measure it.
    deadline: tokio::time::Instant,
    runtime: tokio::runtime::Handle,
}

impl ChannelResponder {
    /// Sends the head if it waits: the connection's task builds the response when it arrives.
    fn release_head(&mut self) -> bool {
        match self.waiting.take() {
            Some(head) => send_first(&self.first, || Ok(head)),
            None => true,
        }
    }
}

impl Responder for ChannelResponder {
    fn head(&mut self, head: Head) -> bool {
        self.content_length = head.content_length();
        // Held until the first bytes of the body (or its end), so that the connection writes
        // them together: one write, not a head alone then a body.
        self.waiting = Some(head);
        true
    }

    fn body(&mut self, chunk: &[u8]) -> bool {
        self.sent += chunk.len() as u64;
        if self.content_length.is_some_and(|l| self.sent >= l) {
            self.admission = None;
        }
        // The chunk goes first, then the head it was held for. Waits while the channel is
        // full (the worker waits for the client), but not past the call's deadline: a client
        // that reads slowly, or not at all, cannot hold a worker longer than a guest may run
        // (the deadline stops only wasm, not a host function waiting).
        let Some(body) = &self.body else {
            return false;
        };
        let chunk = Bytes::copy_from_slice(chunk);
        let send = tokio::time::timeout_at(self.deadline, body.send(chunk));
        let sent = matches!(self.runtime.block_on(send), Ok(Ok(())));
        self.cut |= !sent;
        sent && self.release_head()
    }

    fn end(&mut self, _trailers: Vec<(String, Vec<u8>)>) {
        // (Trailers are dropped: HTTP/1.1 responses here carry none.) The admission goes
        // back before the channel closes, so the client's next request finds room.
        self.admission = None;
        if !self.cut {
            self.ended.store(true, Ordering::Release);
        }
        self.release_head();
        self.body = None;
    }
}

impl Drop for ChannelResponder {
    fn drop(&mut self) {
        // A head still held (the guest failed before writing its body) goes out, and the body
        // is then cut short.
        self.release_head();
    }
}

/// The body as it comes from the component; an error at its close if it did not end.
struct Chunks {
    rx: mpsc::Receiver<Bytes>,
    ended: Arc<AtomicBool>,
    done: bool,
}

impl futures_core::Stream for Chunks {
    type Item = Result<Bytes, std::io::Error>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        if self.done {
            return Poll::Ready(None);
        }
        match self.rx.poll_recv(cx) {
            Poll::Ready(Some(chunk)) => Poll::Ready(Some(Ok(chunk))),
            Poll::Ready(None) => {
                self.done = true;
                if self.ended.load(Ordering::Acquire) {
                    return Poll::Ready(None);
                }
                let cut = std::io::Error::other("the component did not finish its response");
                Poll::Ready(Some(Err(cut)))
            }
            Poll::Pending => Poll::Pending,
        }
    }
}

/// Answers any request with the component the server serves (`--component`).
pub(crate) async fn handle(State(shared): State<Arc<Shared>>, request: Request) -> Response {
    let handler = (shared.component.clone()).expect("served in component mode");
    match answer(shared, handler, request, None).await {
        Ok(response) => response,
        Err(e) => e.into_response(),
    }
}

/// Answers `request` with `handler`, the path and query the component sees replaced by
/// `path` if given.
pub(crate) async fn answer(
    shared: Arc<Shared>,
    handler: Arc<Handler>,
    request: Request,
    path: Option<String>,
) -> Result<Response, ApiError> {
    let limits = shared.config.limits;
    // Refused before its body is read when the server has no room (as module calls are).
    shared.has_room()?;
    let (mut parts, body) = request.into_parts();
    // The server's token is the server's: a guest does not see it.
    if shared.has_token() {
        parts.headers.remove(axum::http::header::AUTHORIZATION);
    }
    let body = axum::body::to_bytes(body, limits.max_input)
        .await
        .map_err(|e| {
            ApiError::new(
                StatusCode::PAYLOAD_TOO_LARGE,
                "too_large",
                format!(
                    "the body could not be read whole within {} bytes: {e}",
                    limits.max_input
                ),
            )
        })?;
    let authority = (parts.uri.authority().map(|a| a.to_string())).or_else(|| {
        let host = parts.headers.get(axum::http::header::HOST)?;
        host.to_str().ok().map(str::to_owned)
    });
    let request = WasiRequest {
        method: parts.method.as_str().to_owned(),
        path_with_query: path.or_else(|| parts.uri.path_and_query().map(|p| p.as_str().to_owned())),
        scheme: Some(parts.uri.scheme_str().unwrap_or("http").to_owned()),
        authority,
        headers: (parts.headers.iter())
            .map(|(n, v)| (n.as_str().to_owned(), v.as_bytes().to_vec()))
            .collect(),
        body: Arc::from(Vec::from(body)),
    };
    let (first_tx, first_rx) = oneshot::channel();
    let first: FirstSlot = Arc::new(Mutex::new(Some(first_tx)));
    let (body_tx, rx) = mpsc::channel(CHUNKS_IN_FLIGHT);
    let ended = Arc::new(AtomicBool::new(false));
    let stream_ended = ended.clone();
    let s = shared.clone();
    let runtime = tokio::runtime::Handle::current();
    // The call runs on without being awaited: the response streams from it, and its outcome,
    // when no head was sent, comes as the request's `First`.
    let _running = start_on_worker(&shared, move |mut place| {
        // The call's time counts from here, as its guest's deadline does.
        let now = tokio::time::Instant::now();
        let timeout = Duration::from_millis(limits.timeout_ms);
        let far = Duration::from_secs(365 * 24 * 3600);
        let responder = ChannelResponder {
            first: first.clone(),
            waiting: None,
            admission: place.take_admission(),
            content_length: None,
            sent: 0,
            body: Some(body_tx),
            ended,
            cut: false,
            deadline: (now.checked_add(timeout)).unwrap_or(now + far),
            runtime,
        };
        let t = Instant::now();
        let handled = handler.call(request, responder, &limits);
        s.metrics.phase("call", t.elapsed());
        drop(place);
        send_first(&first, || Err(unanswered(&s, handled)));
    })
    .await?;
    let head = first_rx.await.map_err(|_| {
        ApiError::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            "internal",
            "the call stopped without an outcome",
        )
    })??;
    let mut response = Response::new(axum::body::Body::from_stream(Chunks {
        rx,
        ended: stream_ended,
        done: false,
    }));
    *response.status_mut() =
        StatusCode::from_u16(head.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    let headers = response.headers_mut();
    for (name, value) in head.headers {
        // (Checked by the WASI host as HTTP's grammar has them; kept safe here anyway.)
        if let (Ok(n), Ok(v)) = (
            HeaderName::from_bytes(name.as_bytes()),
            HeaderValue::from_bytes(&value),
        ) {
            headers.append(n, v);
        }
    }
    Ok(response)
}

/// The answer to a call that ended without sending a head.
fn unanswered(shared: &Shared, handled: Result<Handled, ec::Error>) -> ApiError {
    match handled {
        Ok(Handled::Error(code)) => ApiError::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            "handler_error",
            format!("the component answered with an error: {code}"),
        ),
        Ok(_) => ApiError::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            "no_response",
            "the component returned without setting a response",
        ),
        Err(e) => failed(shared, e),
    }
}

/// The answer to a call that failed before a response was set: `500`, as `wasmtime serve`
/// answers (the application failed, whatever the client sent), with the body a module's call
/// has (a trap's kind, or the limit).
fn failed(shared: &Shared, e: ec::Error) -> ApiError {
    let e = match e {
        ec::Error::Runtime(inner) => CallError::from(inner),
        e @ (ec::Error::Abi(_) | ec::Error::Host(_)) => CallError::Exception(e.to_string()),
        e => CallError::Internal(e.to_string()),
    };
    if let CallError::Trap { kind, .. } = &e {
        let m = &shared.metrics;
        (m.traps.get_or_create(&vec![("kind", format!("{kind:?}"))])).inc();
    }
    ApiError::from(e).with_status(StatusCode::INTERNAL_SERVER_ERROR)
}
