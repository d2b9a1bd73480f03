//! `wasi:http` 0.2 for components: a request handed to a component's
//! `wasi:http/incoming-handler`, and its response passed on as the component makes it.
//!
//! The embedder gives the request ([`Request`], its body read in full: the server bounds it)
//! and a [`Responder`]; [`Proxy::handle`] calls the handler. When the component sets its
//! response (`response-outparam.set`), the responder gets the status and headers at once, then
//! each chunk of the body as the component writes it, then the end: a response streams out
//! while the handler still runs. Body bytes written before the response is set wait in the
//! context, up to [`MAX_BUFFERED`].
//!
//! Fields (headers and trailers) keep names in lower case, as HTTP/2 sends them and wasmtime
//! gives them; names and values are checked as HTTP's grammar has them. Hop-by-hop and
//! proxy headers ([`FORBIDDEN`]) are taken out of a request before the component sees it and
//! cannot be set by it: the server, not the guest, owns the connection.
//!
//! Outgoing requests (`wasi:http/outgoing-handler`) are refused with `HTTP-request-denied`:
//! a guest that may reach the network is a decision for the host, and ephem makes none yet.

use std::sync::Arc;

use ephem_component::{Component, Instance, Linker, Val};
use ephem_runtime::{AsContextMut, HostError, StoreContextMut};

use super::{
    HostResult, InputStream, OutputStream, Stream, Table, Wait, arg, bytes, new_pollable,
    new_stream, ok, own, rep_of, set,
};
use crate::ctx::WasiCtx;

/// Header names a component never sees in a request and cannot set.
pub const FORBIDDEN: [&str; 9] = [
    "connection",
    "keep-alive",
    "proxy-authenticate",
    "proxy-authorization",
    "proxy-connection",
    "transfer-encoding",
    "upgrade",
    "host",
    "http2-settings",
];

/// The most bytes of names and values one set of fields holds.
pub const MAX_FIELDS_BYTES: usize = 128 << 10;

/// The most bytes of fields one context makes in all (made, cloned, set or appended; freed
/// ones are not given back): a guest making fields without end traps instead of taking the
/// host's memory.
pub const MAX_FIELDS_MADE: usize = 16 << 20;

/// The most body bytes a context's components may write, over all bodies, before their
/// responses are set.
pub const MAX_BUFFERED: usize = 16 << 20;

/// An incoming request, as the handler sees it.
#[derive(Clone, Debug)]
pub struct Request {
    /// `GET`, `POST`, …: any token.
    pub method: String,
    /// The path and query (`/a/b?c=d`).
    pub path_with_query: Option<String>,
    /// `http`, `https` or another.
    pub scheme: Option<String>,
    /// `host:port`.
    pub authority: Option<String>,
    /// Names in any case; forbidden ones are taken out before the component sees them.
    pub headers: Vec<(String, Vec<u8>)>,
    /// The whole body.
    pub body: Arc<[u8]>,
}

/// A response's status and headers.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Head {
    /// 100 to 999.
    pub status: u16,
    /// Names in lower case, values as the component set them.
    pub headers: Vec<(String, Vec<u8>)>,
}

impl Head {
    /// The body's length its `content-length` header gives, if it has one that reads as one.
    pub fn content_length(&self) -> Option<u64> {
        let (_, v) = self.headers.iter().find(|(n, _)| n == "content-length")?;
        std::str::from_utf8(v).ok()?.trim().parse().ok()
    }
}

/// Where a handler's response goes, as it is made. Each method returns whether to go on: false
/// when the client has gone or a limit was reached (the component's writes then fail, as on a
/// closed stream).
pub trait Responder: Send {
    /// The status and headers, once, before anything else.
    fn head(&mut self, head: Head) -> bool;
    /// The next bytes of the body.
    fn body(&mut self, chunk: &[u8]) -> bool;
    /// The body is complete; `trailers` may be empty.
    fn end(&mut self, trailers: Vec<(String, Vec<u8>)>);
}

/// How a handler's call ended, for the response.
#[derive(Debug, PartialEq, Eq)]
pub enum Handled {
    /// The response was sent whole.
    Complete,
    /// The head was sent, but the body was not finished (the component dropped it, or
    /// returned before finishing it): the response must be cut short.
    Incomplete,
    /// The component answered with an error code (`response-outparam.set` with `err`), shown
    /// as WAVE; nothing was sent.
    Error(String),
    /// The component returned without setting a response; nothing was sent.
    NoResponse,
}

/// A set of fields.
#[derive(Clone, Default)]
struct Fields {
    entries: Vec<(String, Vec<u8>)>,
    immutable: bool,
}

/// What an entry costs beyond its bytes (its tuple and allocations), counted against the
/// bounds so that many empty entries are not nearly free.
const ENTRY_COST: usize = 64;

impl Fields {
    fn size(&self) -> usize {
        (self.entries.iter())
            .map(|(n, v)| n.len() + v.len() + ENTRY_COST)
            .sum()
    }
}

struct IncomingRequest {
    request: Request,
    consumed: bool,
}

struct OutgoingResponse {
    status: u16,
    headers: Fields,
    body: Option<u32>,
}

/// An outgoing body: bytes waiting for the response to be set, or passed on at once.
#[derive(Default)]
struct Body {
    waiting: Vec<u8>,
    /// Its response was sent: writes go to the responder.
    streaming: bool,
    /// Its stream was given out (there is only one).
    stream_given: bool,
    /// Finished (with these trailers): no more writes.
    finished: Option<Vec<(String, Vec<u8>)>>,
    /// No more writes, and the response must be cut, not ended: the responder said to stop,
    /// a write was refused, or the body was dropped unfinished.
    closed: bool,
    /// Bytes written so far, and what the response's `content-length` says there are.
    written: u64,
    expected: Option<u64>,
}

/// The per-context state of `wasi:http`.
#[derive(Default)]
pub(crate) struct State {
    fields: Table<Fields>,
    requests: Table<IncomingRequest>,
    incoming_bodies: Table<Option<Arc<[u8]>>>,
    /// `future-trailers`: whether `get` has given them.
    trailers: Table<bool>,
    responses: Table<OutgoingResponse>,
    bodies: Table<Body>,
    outparams: Table<()>,
    options: Table<()>,
    responder: Option<Box<dyn Responder>>,
    /// Bytes of fields made so far (see [`MAX_FIELDS_MADE`]).
    fields_made: usize,
    /// Body bytes waiting for their responses, over all bodies.
    buffered: usize,
    /// The body of the response sent (`None`: none sent, or one without a body).
    sent: Option<Option<u32>>,
    error: Option<String>,
}

/// The resource types of `wasi:http/types`, as the linker knows them.
mod ty {
    pub struct Fields;
    pub struct IncomingRequest;
    pub struct OutgoingRequest;
    pub struct RequestOptions;
    pub struct ResponseOutparam;
    pub struct IncomingResponse;
    pub struct IncomingBody;
    pub struct FutureTrailers;
    pub struct OutgoingResponse;
    pub struct OutgoingBody;
    pub struct FutureIncomingResponse;
}

/// Writes `data` to outgoing body `body`: whether it was taken.
pub(crate) fn write(ctx: &mut WasiCtx, body: u32, data: &[u8]) -> bool {
    let state = &mut ctx.p2.http;
    let Ok(b) = state.bodies.get_mut(body) else {
        return false;
    };
    if b.finished.is_some() || b.closed {
        return false;
    }
    let written = b.written + data.len() as u64;
    // Past the declared length, or past what may wait for the response: the body is cut.
    if b.expected.is_some_and(|l| written > l)
        || (!b.streaming && state.buffered + data.len() > MAX_BUFFERED)
    {
        b.closed = true;
        return false;
    }
    b.written = written;
    if !b.streaming {
        state.buffered += data.len();
        b.waiting.extend_from_slice(data);
        return true;
    }
    let go_on = (state.responder.as_mut()).is_some_and(|r| r.body(data));
    b.closed |= !go_on;
    go_on
}

/// Whether `body` may end: finished, nothing cut, as long as its `content-length` says.
fn whole(body: &Body) -> bool {
    body.finished.is_some() && !body.closed && body.expected.is_none_or(|l| l == body.written)
}

fn name(iface: &str) -> String {
    format!("wasi:http/{iface}@{}", super::VERSION)
}

fn string(v: &Val) -> Result<&str, HostError> {
    match v {
        Val::String(s) => Ok(s),
        other => Err(format!("a string expected, not {other:?}").into()),
    }
}

fn header_error(case: &str) -> Val {
    Val::Result(Err(Some(Box::new(Val::Variant(case.into(), None)))))
}

/// Why a field's name or value is refused (a `header-error` case), if it is.
fn refused(name: &str, value: Option<&[u8]>) -> Option<&'static str> {
    let token = |c: u8| c.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&c);
    if name.is_empty() || !name.bytes().all(token) {
        return Some("invalid-syntax");
    }
    // Visible characters, spaces and tabs: no control characters (CR and LF above all).
    let visible = |&c: &u8| c == b'\t' || (c >= 0x20 && c != 0x7f);
    if value.is_some_and(|v| !v.iter().all(visible)) {
        return Some("invalid-syntax");
    }
    if FORBIDDEN.contains(&name.to_ascii_lowercase().as_str()) {
        return Some("forbidden");
    }
    None
}

fn entries(fields: &Fields) -> Val {
    Val::List(
        (fields.entries.iter())
            .map(|(n, v)| Val::Tuple(vec![Val::String(n.clone()), super::list_of_bytes(v)]))
            .collect(),
    )
}

fn new_fields(ctx: &mut WasiCtx, fields: Fields) -> Result<Val, HostError> {
    if fields.size() > MAX_FIELDS_BYTES {
        return Err(format!("fields of more than {MAX_FIELDS_BYTES} bytes").into());
    }
    let state = &mut ctx.p2.http;
    state.charge_fields(fields.size())?;
    Ok(own::<ty::Fields>(state.fields.push(fields)?))
}

/// Takes the fields of an owned handle passed in (a constructor's headers, trailers).
fn take_fields(ctx: &mut WasiCtx, v: &Val) -> Result<Fields, HostError> {
    ctx.p2.http.fields.take(rep_of::<ty::Fields>(v)?)
}

/// Adds `wasi:http/types` and `wasi:http/outgoing-handler` (which refuses every request) to
/// `linker`, with each store's context found by `get`. Needs [`super::add_to_linker`]'s
/// interfaces too (streams, pollables).
pub fn add_to_linker<T: 'static>(
    linker: &mut Linker<T>,
    get: fn(&mut T) -> &mut WasiCtx,
) -> Result<(), ephem_component::Error> {
    use ephem_component::ResourceType as R;
    let mut types = linker.instance(&name("types"))?;
    macro_rules! resource {
        ($name:literal, $ty:ty, $table:ident) => {
            types.resource(
                $name,
                R::host::<$ty>(),
                move |mut s: StoreContextMut<'_, T>, rep| {
                    get(s.data_mut()).p2.http.$table.take(rep).map(drop)
                },
            )?;
        };
    }
    resource!("fields", ty::Fields, fields);
    resource!("incoming-request", ty::IncomingRequest, requests);
    resource!("incoming-body", ty::IncomingBody, incoming_bodies);
    resource!("future-trailers", ty::FutureTrailers, trailers);
    resource!("outgoing-response", ty::OutgoingResponse, responses);
    resource!("response-outparam", ty::ResponseOutparam, outparams);
    resource!("request-options", ty::RequestOptions, options);
    // None of these is ever made: outgoing requests are refused.
    for (name, ty) in [
        ("outgoing-request", R::host::<ty::OutgoingRequest>()),
        ("incoming-response", R::host::<ty::IncomingResponse>()),
        (
            "future-incoming-response",
            R::host::<ty::FutureIncomingResponse>(),
        ),
    ] {
        types.resource(name, ty, |_, _| Ok(()))?;
    }
    types.resource(
        "outgoing-body",
        R::host::<ty::OutgoingBody>(),
        move |mut s: StoreContextMut<'_, T>, rep| {
            let state = &mut get(s.data_mut()).p2.http;
            let body = state.bodies.get_mut(rep)?;
            // Dropped unfinished: cut. (Kept in the table: its response may still be sent,
            // and must then be cut rather than ended.)
            body.closed = true;
            Ok(())
        },
    )?;

    fields(&mut types, get)?;
    requests(&mut types, get)?;
    responses(&mut types, get)?;

    types.func_new("http-error-code", |_, _, _, r| set(r, Val::Option(None)))?;
    // Options of outgoing requests, which are refused: none is kept.
    for method in [
        "connect-timeout",
        "first-byte-timeout",
        "between-bytes-timeout",
    ] {
        types.func_new(
            &format!("[method]request-options.{method}"),
            |_, _, _, r| set(r, Val::Option(None)),
        )?;
        types.func_new(
            &format!("[method]request-options.set-{method}"),
            |_, _, _, r| set(r, Val::Result(Ok(None))),
        )?;
    }
    types.func_new(
        "[constructor]request-options",
        move |mut s: StoreContextMut<'_, T>, _, _, r| {
            let rep = get(s.data_mut()).p2.http.options.push(())?;
            set(r, own::<ty::RequestOptions>(rep))
        },
    )?;

    let mut out = linker.instance(&name("outgoing-handler"))?;
    out.func_new("handle", |_, _, _, r| {
        let denied = Val::Variant("HTTP-request-denied".into(), None);
        set(r, Val::Result(Err(Some(Box::new(denied)))))
    })?;
    Ok(())
}

fn fields<T: 'static>(
    types: &mut ephem_component::LinkerInstance<'_, T>,
    get: fn(&mut T) -> &mut WasiCtx,
) -> Result<(), ephem_component::Error> {
    types.func_new(
        "[constructor]fields",
        move |mut s: StoreContextMut<'_, T>, _, _, r| {
            set(r, new_fields(get(s.data_mut()), Fields::default())?)
        },
    )?;
    types.func_new(
        "[static]fields.from-list",
        move |mut s: StoreContextMut<'_, T>, _, p, r| {
            let Val::List(list) = arg(p, 0)? else {
                return Err("a list of fields expected".into());
            };
            let mut fields = Fields::default();
            for item in list {
                let Val::Tuple(pair) = item else {
                    return Err("a (name, value) pair expected".into());
                };
                let (Some(n), Some(v)) = (pair.first(), pair.get(1)) else {
                    return Err("a (name, value) pair expected".into());
                };
                let (n, v) = (string(n)?, bytes(v)?);
                if let Some(case) = refused(n, Some(&v)) {
                    return set(r, header_error(case));
                }
                fields.entries.push((n.to_ascii_lowercase(), v));
            }
            set(r, ok(Some(new_fields(get(s.data_mut()), fields)?)))
        },
    )?;
    // The fields and the name a method is called with.
    let this = |p: &[Val]| -> Result<(u32, String), HostError> {
        Ok((
            rep_of::<ty::Fields>(arg(p, 0)?)?,
            string(arg(p, 1)?)?.to_ascii_lowercase(),
        ))
    };
    types.func_new(
        "[method]fields.get",
        move |mut s: StoreContextMut<'_, T>, _, p, r| {
            let (f, n) = this(p)?;
            let fields = get(s.data_mut()).p2.http.fields.get(f)?;
            let values = (fields.entries.iter())
                .filter(|(name, _)| *name == n)
                .map(|(_, v)| super::list_of_bytes(v))
                .collect();
            set(r, Val::List(values))
        },
    )?;
    types.func_new(
        "[method]fields.has",
        move |mut s: StoreContextMut<'_, T>, _, p, r| {
            let (f, n) = this(p)?;
            let fields = get(s.data_mut()).p2.http.fields.get(f)?;
            set(
                r,
                Val::Bool(fields.entries.iter().any(|(name, _)| *name == n)),
            )
        },
    )?;
    // set, delete and append: a change of mutable fields, checked first.
    for method in ["set", "delete", "append"] {
        types.func_new(
            &format!("[method]fields.{method}"),
            move |mut s: StoreContextMut<'_, T>, _, p, r| {
                let (f, n) = this(p)?;
                let values = match method {
                    "set" => match arg(p, 2)? {
                        Val::List(vs) => vs.iter().map(bytes).collect::<Result<Vec<_>, _>>()?,
                        other => return Err(format!("a list expected, not {other:?}").into()),
                    },
                    "append" => vec![bytes(arg(p, 2)?)?],
                    _ => Vec::new(),
                };
                let state = &mut get(s.data_mut()).p2.http;
                let fields = state.fields.get_mut(f)?;
                let refusal = if fields.immutable {
                    Some("immutable")
                } else {
                    (values.iter())
                        .map(|v| refused(&n, Some(v)))
                        .find(Option::is_some)
                        .unwrap_or_else(|| refused(&n, None))
                };
                if let Some(case) = refusal {
                    return set(r, header_error(case));
                }
                let grown: usize = values.iter().map(|v| n.len() + v.len() + ENTRY_COST).sum();
                if fields.size() + grown > MAX_FIELDS_BYTES {
                    return Err(format!("fields of more than {MAX_FIELDS_BYTES} bytes").into());
                }
                state.charge_fields(grown)?;
                let fields = state.fields.get_mut(f)?;
                if method != "append" {
                    fields.entries.retain(|(name, _)| *name != n);
                }
                fields
                    .entries
                    .extend(values.into_iter().map(|v| (n.clone(), v)));
                set(r, ok(None))
            },
        )?;
    }
    types.func_new(
        "[method]fields.entries",
        move |mut s: StoreContextMut<'_, T>, _, p, r| {
            let fields = get(s.data_mut())
                .p2
                .http
                .fields
                .get(rep_of::<ty::Fields>(arg(p, 0)?)?)?;
            set(r, entries(fields))
        },
    )?;
    types.func_new(
        "[method]fields.clone",
        move |mut s: StoreContextMut<'_, T>, _, p, r| {
            let ctx = get(s.data_mut());
            let mut copy = ctx
                .p2
                .http
                .fields
                .get(rep_of::<ty::Fields>(arg(p, 0)?)?)?
                .clone();
            copy.immutable = false;
            set(r, new_fields(ctx, copy)?)
        },
    )?;
    Ok(())
}

fn requests<T: 'static>(
    types: &mut ephem_component::LinkerInstance<'_, T>,
    get: fn(&mut T) -> &mut WasiCtx,
) -> Result<(), ephem_component::Error> {
    type Read = fn(&Request) -> Val;
    let methods: [(&str, Read); 4] = [
        ("method", |q| method(&q.method)),
        ("path-with-query", |q| {
            Val::Option(q.path_with_query.clone().map(|p| Box::new(Val::String(p))))
        }),
        ("scheme", |q| {
            Val::Option(q.scheme.as_deref().map(|s| {
                Box::new(match s.to_ascii_lowercase().as_str() {
                    "http" => Val::Variant("HTTP".into(), None),
                    "https" => Val::Variant("HTTPS".into(), None),
                    _ => Val::Variant("other".into(), Some(Box::new(Val::String(s.into())))),
                })
            }))
        }),
        ("authority", |q| {
            Val::Option(q.authority.clone().map(|a| Box::new(Val::String(a))))
        }),
    ];
    for (method, read) in methods {
        types.func_new(
            &format!("[method]incoming-request.{method}"),
            move |mut s: StoreContextMut<'_, T>, _, p, r| {
                let q = get(s.data_mut())
                    .p2
                    .http
                    .requests
                    .get(rep_of::<ty::IncomingRequest>(arg(p, 0)?)?)?;
                set(r, read(&q.request))
            },
        )?;
    }
    types.func_new(
        "[method]incoming-request.headers",
        move |mut s: StoreContextMut<'_, T>, _, p, r| {
            let ctx = get(s.data_mut());
            let q = ctx
                .p2
                .http
                .requests
                .get(rep_of::<ty::IncomingRequest>(arg(p, 0)?)?)?;
            let headers = Fields {
                entries: q.request.headers.clone(),
                immutable: true,
            };
            set(r, new_fields(ctx, headers)?)
        },
    )?;
    types.func_new(
        "[method]incoming-request.consume",
        move |mut s: StoreContextMut<'_, T>, _, p, r| {
            let state = &mut get(s.data_mut()).p2.http;
            let q = state
                .requests
                .get_mut(rep_of::<ty::IncomingRequest>(arg(p, 0)?)?)?;
            if std::mem::replace(&mut q.consumed, true) {
                return set(r, Val::Result(Err(None)));
            }
            let body = q.request.body.clone();
            let b = state.incoming_bodies.push(Some(body))?;
            set(r, ok(Some(own::<ty::IncomingBody>(b))))
        },
    )?;
    types.func_new(
        "[method]incoming-body.stream",
        move |mut s: StoreContextMut<'_, T>, _, p, r| {
            let ctx = get(s.data_mut());
            let taken = ctx
                .p2
                .http
                .incoming_bodies
                .get_mut(rep_of::<ty::IncomingBody>(arg(p, 0)?)?)?
                .take();
            let Some(data) = taken else {
                return set(r, Val::Result(Err(None)));
            };
            let stream = new_stream::<InputStream>(ctx, Stream::In { data, at: 0 })?;
            set(r, ok(Some(stream)))
        },
    )?;
    types.func_new(
        "[static]incoming-body.finish",
        move |mut s: StoreContextMut<'_, T>, _, p, r| {
            let state = &mut get(s.data_mut()).p2.http;
            state
                .incoming_bodies
                .take(rep_of::<ty::IncomingBody>(arg(p, 0)?)?)?;
            let t = state.trailers.push(false)?;
            set(r, own::<ty::FutureTrailers>(t))
        },
    )?;
    types.func_new(
        "[method]future-trailers.subscribe",
        move |mut s: StoreContextMut<'_, T>, _, _, r| {
            set(r, new_pollable(get(s.data_mut()), Wait::Ready)?)
        },
    )?;
    types.func_new(
        "[method]future-trailers.get",
        move |mut s: StoreContextMut<'_, T>, _, p, r| {
            let given = get(s.data_mut())
                .p2
                .http
                .trailers
                .get_mut(rep_of::<ty::FutureTrailers>(arg(p, 0)?)?)?;
            // Ready at once: a request's body is read whole, and has no trailers. Asked again,
            // the answer is `err`, as the interface says.
            let answer = match std::mem::replace(given, true) {
                false => Val::Result(Ok(Some(Box::new(ok(Some(Val::Option(None))))))),
                true => Val::Result(Err(None)),
            };
            set(r, Val::Option(Some(Box::new(answer))))
        },
    )?;
    Ok(())
}

/// `method` as the `method` variant.
fn method(m: &str) -> Val {
    let case = match m {
        "GET" => "get",
        "HEAD" => "head",
        "POST" => "post",
        "PUT" => "put",
        "DELETE" => "delete",
        "CONNECT" => "connect",
        "OPTIONS" => "options",
        "TRACE" => "trace",
        "PATCH" => "patch",
        other => return Val::Variant("other".into(), Some(Box::new(Val::String(other.into())))),
    };
    Val::Variant(case.into(), None)
}

fn responses<T: 'static>(
    types: &mut ephem_component::LinkerInstance<'_, T>,
    get: fn(&mut T) -> &mut WasiCtx,
) -> Result<(), ephem_component::Error> {
    types.func_new(
        "[constructor]outgoing-response",
        move |mut s: StoreContextMut<'_, T>, _, p, r| {
            let ctx = get(s.data_mut());
            let headers = take_fields(ctx, arg(p, 0)?)?;
            let response = OutgoingResponse {
                status: 200,
                headers,
                body: None,
            };
            set(
                r,
                own::<ty::OutgoingResponse>(ctx.p2.http.responses.push(response)?),
            )
        },
    )?;
    types.func_new(
        "[method]outgoing-response.status-code",
        move |mut s: StoreContextMut<'_, T>, _, p, r| {
            let response = get(s.data_mut())
                .p2
                .http
                .responses
                .get(rep_of::<ty::OutgoingResponse>(arg(p, 0)?)?)?;
            set(r, Val::U16(response.status))
        },
    )?;
    types.func_new(
        "[method]outgoing-response.set-status-code",
        move |mut s: StoreContextMut<'_, T>, _, p, r| {
            let response = get(s.data_mut()).p2.http.responses.get_mut(rep_of::<
                ty::OutgoingResponse,
            >(arg(
                p, 0,
            )?)?)?;
            let Val::U16(status) = *arg(p, 1)? else {
                return Err("a u16 status expected".into());
            };
            // (A final status: informational ones are not a response's.)
            if !(200..=999).contains(&status) {
                return set(r, Val::Result(Err(None)));
            }
            response.status = status;
            set(r, Val::Result(Ok(None)))
        },
    )?;
    types.func_new(
        "[method]outgoing-response.headers",
        move |mut s: StoreContextMut<'_, T>, _, p, r| {
            let ctx = get(s.data_mut());
            let response = ctx
                .p2
                .http
                .responses
                .get(rep_of::<ty::OutgoingResponse>(arg(p, 0)?)?)?;
            let mut headers = response.headers.clone();
            headers.immutable = true;
            set(r, new_fields(ctx, headers)?)
        },
    )?;
    types.func_new(
        "[method]outgoing-response.body",
        move |mut s: StoreContextMut<'_, T>, _, p, r| {
            let state = &mut get(s.data_mut()).p2.http;
            let response = rep_of::<ty::OutgoingResponse>(arg(p, 0)?)?;
            if state.responses.get(response)?.body.is_some() {
                return set(r, Val::Result(Err(None)));
            }
            let body = state.bodies.push(Body::default())?;
            state.responses.get_mut(response)?.body = Some(body);
            set(r, ok(Some(own::<ty::OutgoingBody>(body))))
        },
    )?;
    types.func_new(
        "[method]outgoing-body.write",
        move |mut s: StoreContextMut<'_, T>, _, p, r| {
            let ctx = get(s.data_mut());
            let b = rep_of::<ty::OutgoingBody>(arg(p, 0)?)?;
            let body = ctx.p2.http.bodies.get_mut(b)?;
            if std::mem::replace(&mut body.stream_given, true) {
                return set(r, Val::Result(Err(None)));
            }
            let stream = new_stream::<OutputStream>(ctx, Stream::Out(b))?;
            set(r, ok(Some(stream)))
        },
    )?;
    types.func_new(
        "[static]outgoing-body.finish",
        move |mut s: StoreContextMut<'_, T>, _, p, r| {
            let ctx = get(s.data_mut());
            let b = rep_of::<ty::OutgoingBody>(arg(p, 0)?)?;
            let trailers = match arg(p, 1)? {
                Val::Option(Some(t)) => take_fields(ctx, t)?.entries,
                _ => Vec::new(),
            };
            let state = &mut ctx.p2.http;
            let body = state.bodies.get_mut(b)?;
            let error = if body.closed {
                Some(Val::Variant(
                    "internal-error".into(),
                    Some(Box::new(Val::Option(Some(Box::new(Val::String(
                        "the body was cut short".into(),
                    )))))),
                ))
            } else if body.expected.is_some_and(|l| l != body.written) {
                body.closed = true;
                let written = Val::Option(Some(Box::new(Val::U64(body.written))));
                Some(Val::Variant(
                    "HTTP-response-body-size".into(),
                    Some(Box::new(written)),
                ))
            } else {
                None
            };
            body.finished = Some(trailers.clone());
            if let (None, true, Some(responder)) = (&error, body.streaming, &mut state.responder) {
                responder.end(trailers);
            }
            set(
                r,
                match error {
                    None => ok(None),
                    Some(e) => Val::Result(Err(Some(Box::new(e)))),
                },
            )
        },
    )?;
    types.func_new(
        "[static]response-outparam.set",
        move |mut s: StoreContextMut<'_, T>, _, p, _| -> HostResult {
            let state = &mut get(s.data_mut()).p2.http;
            state
                .outparams
                .take(rep_of::<ty::ResponseOutparam>(arg(p, 0)?)?)?;
            let response = match arg(p, 1)? {
                Val::Result(Ok(Some(response))) => {
                    state
                        .responses
                        .take(rep_of::<ty::OutgoingResponse>(response)?)?
                }
                Val::Result(Err(Some(code))) => {
                    state.error = Some(code.to_string());
                    state.responder = None;
                    return Ok(());
                }
                other => return Err(format!("a response expected, not {other:?}").into()),
            };
            state.send(response);
            Ok(())
        },
    )?;
    types.func_new(
        "[method]response-outparam.send-informational",
        |_, _, _, r| {
            let unsupported = Val::Variant(
                "internal-error".into(),
                Some(Box::new(Val::Option(Some(Box::new(Val::String(
                    "informational responses are not sent".into(),
                )))))),
            );
            set(r, Val::Result(Err(Some(Box::new(unsupported)))))
        },
    )?;
    Ok(())
}

impl State {
    /// Counts `bytes` more of fields made, up to [`MAX_FIELDS_MADE`].
    fn charge_fields(&mut self, bytes: usize) -> Result<(), HostError> {
        self.fields_made += bytes;
        if self.fields_made > MAX_FIELDS_MADE {
            return Err(format!("more than {MAX_FIELDS_MADE} bytes of fields made").into());
        }
        Ok(())
    }

    /// Sends `response`'s head, and its body as far as it is written.
    fn send(&mut self, response: OutgoingResponse) {
        self.sent = Some(response.body);
        let Some(responder) = &mut self.responder else {
            return;
        };
        let head = Head {
            status: response.status,
            headers: response.headers.entries,
        };
        let content_length = head.content_length();
        let mut go_on = responder.head(head);
        let Some(b) = response.body else {
            // A response without a body has an empty one.
            responder.end(Vec::new());
            return;
        };
        let Ok(body) = self.bodies.get_mut(b) else {
            return;
        };
        body.streaming = true;
        body.expected = content_length;
        if content_length.is_some_and(|l| body.written > l) {
            body.closed = true;
        }
        let waiting = std::mem::take(&mut body.waiting);
        self.buffered -= waiting.len();
        if go_on && !body.closed && !waiting.is_empty() {
            go_on = responder.body(&waiting);
        }
        body.closed |= !go_on;
        if whole(body) {
            responder.end(body.finished.clone().unwrap_or_default());
        }
    }

    /// How the handler's call ended.
    fn handled(&mut self) -> Handled {
        if let Some(code) = self.error.take() {
            return Handled::Error(code);
        }
        match self.sent {
            None => Handled::NoResponse,
            Some(None) => Handled::Complete,
            Some(Some(b)) => match self.bodies.get(b) {
                Ok(body) if whole(body) => Handled::Complete,
                _ => Handled::Incomplete,
            },
        }
    }
}

/// A component's `wasi:http/incoming-handler`, found once.
#[derive(Clone, Debug)]
pub struct Proxy {
    interface: String,
}

impl Proxy {
    /// The handler `component` exports, or why it has none.
    pub fn new(component: &Component) -> Result<Proxy, String> {
        let funcs = component.exported_funcs();
        let handle = funcs.iter().find(|(path, _)| {
            path.len() == 2
                && path[0].starts_with("wasi:http/incoming-handler@0.2.")
                && path[1] == "handle"
        });
        match handle {
            Some((path, ty)) if ty.params.len() == 2 && ty.result.is_none() => Ok(Proxy {
                interface: path[0].clone(),
            }),
            Some(_) => Err("its `wasi:http/incoming-handler`'s `handle` has another type".into()),
            None => Err("it exports no `wasi:http/incoming-handler@0.2.x`".into()),
        }
    }

    /// Calls the handler of `instance` (in a store whose context `get` finds) with `request`;
    /// its response goes to `responder` as it is made.
    pub fn handle<T>(
        &self,
        mut store: impl AsContextMut<Data = T>,
        instance: &Instance,
        get: fn(&mut T) -> &mut WasiCtx,
        mut request: Request,
        responder: Box<dyn Responder>,
    ) -> Result<Handled, ephem_component::Error> {
        let index = instance.get_export_index(&mut store, None, &self.interface);
        let index = index.and_then(|i| instance.get_export_index(&mut store, Some(&i), "handle"));
        let func = index
            .and_then(|i| instance.get_func(&mut store, i))
            .ok_or_else(|| ephem_component::Error::Link("no `handle` in this instance".into()))?;
        request
            .headers
            .retain(|(n, _)| !FORBIDDEN.contains(&n.to_ascii_lowercase().as_str()));
        for (n, _) in &mut request.headers {
            n.make_ascii_lowercase();
        }
        let mut ctx = store.as_context_mut();
        let state = &mut get(ctx.data_mut()).p2.http;
        state.responder = Some(responder);
        let q = state.requests.push(IncomingRequest {
            request,
            consumed: false,
        });
        let o = state.outparams.push(());
        let (q, o) = (q.map_err(host)?, o.map_err(host)?);
        let params = [
            own::<ty::IncomingRequest>(q),
            own::<ty::ResponseOutparam>(o),
        ];
        let called = func.call(&mut store, &params, &mut []);
        let mut ctx = store.as_context_mut();
        let state = &mut get(ctx.data_mut()).p2.http;
        let handled = state.handled();
        state.responder = None;
        called.map(|()| handled)
    }
}

fn host(e: HostError) -> ephem_component::Error {
    ephem_component::Error::Link(e.to_string())
}
