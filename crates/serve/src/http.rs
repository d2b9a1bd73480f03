//! The HTTP interface: routes, access checks, the worker gate and the mapping of outcomes to
//! statuses.
//!
//! | route | success | errors |
//! | --- | --- | --- |
//! | `PUT /modules` (wasm body) | `201` (`200` if it was there) `{id, exports, imports}` | `400` invalid or imports other than WASI, `413` too large |
//! | `PUT /modules` (a `wasi:http` component) | `201` (`200`) `{id, kind: "component", exports, http}` | `400` invalid, no handler, or imports other than WASI |
//! | `ANY /modules/{id}/http/{path}` | the component's answer to the request for `/{path}` | `404`, `413`, `500` trap or no response, `503` busy |
//! | `GET /modules/{id}` | `200` `{id, exports, imports}` | `404` |
//! | `DELETE /modules/{id}` | `204` | `404` |
//! | `POST /modules/{id}/invoke/{export}` (JSON array of arguments) | `200` `{results, fuel_used, time_us}` | `400` arguments, `404`, `413`, `422` trap or limit, `503` busy |
//! | `POST /modules/{id}/run?arg=…&env=K=V&input=NAME` (stdin, or the file `NAME`) | `200`, the body is stdout | as above |
//! | `GET /healthz`, `GET /metrics` | `200` | |
//!
//! A command's body is its standard input; with `input=NAME` it is instead the file `NAME` in
//! a read-only directory preopened as `.`, for programs that read named files (Sightglass's
//! `default.input`). A command's exit status, fuel and time, and the first 4 KiB of its stderr
//! (percent-encoded; what followed is dropped, and counted in `x-ephem-stderr-dropped`) are the
//! headers `x-ephem-exit-code`, `x-ephem-fuel-used`, `x-ephem-time-us` and `x-ephem-stderr`;
//! a non-zero exit status is still `200`. Every error body is JSON: `{error, message}`, with
//! `kind` for traps (`OutOfFuel`, `Interrupted`, `MemoryOutOfBounds`, …). Limits may be lowered
//! per request with the query parameters `fuel`, `timeout_ms` (or `timeout`, a duration such as
//! `250ms`), `max_memory` and `max_output` (sizes such as `1m` or `2MiB`; see `ephem::units`).
//! A call the server has no room for is answered `503` (with `Retry-After`) before its body is
//! read ([`Room`]).

use std::future::Future;
use std::num::NonZeroUsize;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use axum::body::Bytes;
use axum::extract::{DefaultBodyLimit, MatchedPath, Path, RawQuery, Request, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{any, get, post, put};
use axum::{Json, Router};
use serde_json::{Value, json};
use tokio::sync::Semaphore;

use ephem::InstancePre;
use lru::LruCache;

use crate::component::Handler;
use crate::config::{Config, Requested};
use crate::exec::{CallError, Executor, Host, InputFile, Measured};
use crate::metrics::Metrics;
use crate::registry::{Found, Registry, RegistryError};

/// What every handler shares.
pub struct Shared {
    pub config: Config,
    pub registry: Registry,
    pub exec: Executor,
    pub metrics: Metrics,
    token: Option<Vec<u8>>,
    /// Modules kept open and linked for the calls that follow, by id (`None`: none kept).
    prepared: Option<Mutex<LruCache<String, InstancePre<Host>>>>,
    /// Components, likewise.
    prepared_components: Option<Mutex<LruCache<String, Arc<Handler>>>>,
    workers: Arc<Semaphore>,
    /// Calls in the server, running or waiting: `workers` + the queue's length.
    admitted: Arc<Semaphore>,
    compiles: Arc<Semaphore>,
    /// The component served at every path (`ephem serve --component`), if any.
    pub component: Option<Arc<crate::component::Handler>>,
}

impl Shared {
    pub fn new(
        config: Config,
        registry: Registry,
        exec: Executor,
        token: Option<Vec<u8>>,
    ) -> Shared {
        Shared {
            workers: Arc::new(Semaphore::new(config.workers.max(1))),
            admitted: Arc::new(Semaphore::new(config.workers.max(1) + config.queue())),
            compiles: Arc::new(Semaphore::new(config.compile_workers.max(1))),
            prepared: NonZeroUsize::new(config.open_modules).map(|n| Mutex::new(LruCache::new(n))),
            prepared_components: NonZeroUsize::new(config.open_modules)
                .map(|n| Mutex::new(LruCache::new(n))),
            metrics: Metrics::default(),
            config,
            registry,
            exec,
            token,
            component: None,
        }
    }
}

impl Shared {
    /// Whether the server requires a token.
    pub(crate) fn has_token(&self) -> bool {
        self.token.is_some()
    }

    /// `503` now if every worker is busy and the queue is full (see [`Room`]).
    pub(crate) fn has_room(&self) -> Result<(), ApiError> {
        match self.admitted.available_permits() {
            0 => Err(busy(self)),
            _ => Ok(()),
        }
    }
}

/// An error answer: a status and a JSON body.
pub struct ApiError {
    status: StatusCode,
    body: Value,
    retry_after: bool,
}

impl ApiError {
    pub fn new(status: StatusCode, error: &str, message: impl std::fmt::Display) -> ApiError {
        ApiError {
            status,
            body: json!({"error": error, "message": message.to_string()}),
            retry_after: false,
        }
    }
}

impl ApiError {
    /// The same answer with another status.
    pub(crate) fn with_status(self, status: StatusCode) -> ApiError {
        ApiError { status, ..self }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let mut response = (self.status, Json(self.body)).into_response();
        if self.retry_after {
            response
                .headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
        }
        if self.status == StatusCode::UNAUTHORIZED {
            response
                .headers_mut()
                .insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
        }
        response
    }
}

impl From<RegistryError> for ApiError {
    fn from(e: RegistryError) -> ApiError {
        match e {
            RegistryError::NotFound(_) => ApiError::new(StatusCode::NOT_FOUND, "not_found", e),
            RegistryError::Invalid(_) => ApiError::new(StatusCode::BAD_REQUEST, "invalid", e),
            RegistryError::Internal(_) => {
                ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, "internal", e)
            }
        }
    }
}

impl From<CallError> for ApiError {
    fn from(e: CallError) -> ApiError {
        match e {
            CallError::NotFound(m) => ApiError::new(StatusCode::NOT_FOUND, "not_found", m),
            CallError::BadRequest(m) => ApiError::new(StatusCode::BAD_REQUEST, "bad_request", m),
            CallError::Trap { kind, message } => ApiError {
                status: StatusCode::UNPROCESSABLE_ENTITY,
                body: json!({"error": "trap", "kind": format!("{kind:?}"), "message": message}),
                retry_after: false,
            },
            CallError::Exception(m) => {
                ApiError::new(StatusCode::UNPROCESSABLE_ENTITY, "exception", m)
            }
            CallError::Limit(m) => ApiError::new(StatusCode::UNPROCESSABLE_ENTITY, "limit", m),
            CallError::Internal(m) => {
                ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, "internal", m)
            }
        }
    }
}

type App = State<Arc<Shared>>;

/// The routes, over `shared`: every path to the component it serves, if it serves one.
pub fn router(shared: Arc<Shared>) -> Router {
    let limits = shared.config.limits;
    if shared.component.is_some() {
        return Router::new()
            .fallback(crate::component::handle)
            .layer(middleware::from_fn_with_state(shared.clone(), authorize))
            .layer(middleware::from_fn_with_state(shared.clone(), observe))
            .with_state(shared);
    }
    let modules = Router::new()
        .route(
            "/modules",
            put(upload).layer(DefaultBodyLimit::max(limits.max_module)),
        )
        .route("/modules/{id}", get(describe).delete(remove))
        .route(
            "/modules/{id}/invoke/{export}",
            post(invoke).layer(DefaultBodyLimit::max(limits.max_input)),
        )
        .route(
            "/modules/{id}/run",
            post(run).layer(DefaultBodyLimit::max(limits.max_input)),
        )
        .route("/modules/{id}/http", any(http_root))
        .route("/modules/{id}/http/{*path}", any(http_path))
        .route_layer(middleware::from_fn_with_state(shared.clone(), authorize));
    Router::new()
        .route("/healthz", get(|| async { "ok\n" }))
        .route("/metrics", get(metrics))
        .merge(modules)
        .layer(middleware::from_fn_with_state(shared.clone(), observe))
        .with_state(shared)
}

/// Serves `router` on `listener` until `shutdown` completes, then lets the requests in flight
/// finish.
pub async fn serve(
    listener: tokio::net::TcpListener,
    router: Router,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    // No Nagle delay: a response written in pieces (a head, then a streamed body) would
    // otherwise wait for the client's delayed acknowledgement, tens of milliseconds.
    let listener = axum::serve::ListenerExt::tap_io(listener, |tcp| {
        let _ = tcp.set_nodelay(true);
    });
    axum::serve(listener, router)
        .with_graceful_shutdown(shutdown)
        .await
}

/// Counts every request by route and status, and logs it when the configuration asks for an
/// access log (a line per request costs about a tenth of a small call's throughput, written to
/// an unbuffered stderr) or when the server failed (`5xx`).
async fn observe(State(shared): App, request: Request, next: Next) -> Response {
    let t = Instant::now();
    let route = request
        .extensions()
        .get::<MatchedPath>()
        .map_or("unmatched".to_owned(), |p| p.as_str().to_owned());
    let method = request.method().clone();
    let response = next.run(request).await;
    let status = response.status().as_u16();
    let m = &shared.metrics;
    (m.requests.get_or_create(&vec![
        ("route", route.clone()),
        ("status", status.to_string()),
    ]))
    .inc();
    m.phase("request", t.elapsed());
    let micros = t.elapsed().as_micros() as u64;
    if status >= 500 {
        tracing::warn!(%method, %route, status, micros, "request");
    } else if shared.config.access_log {
        tracing::info!(%method, %route, status, micros, "request");
    }
    response
}

/// Requires the bearer token, when the server has one. Compared in constant time.
async fn authorize(
    State(shared): App,
    headers: HeaderMap,
    request: Request,
    next: Next,
) -> Result<Response, ApiError> {
    if let Some(token) = &shared.token {
        let given = headers
            .get(header::AUTHORIZATION)
            .and_then(|v| v.as_bytes().strip_prefix(b"Bearer "))
            .unwrap_or_default();
        if !bool::from(subtle::ConstantTimeEq::ct_eq(given, token.as_slice())) {
            return Err(ApiError::new(
                StatusCode::UNAUTHORIZED,
                "unauthorized",
                "a valid bearer token is required",
            ));
        }
    }
    Ok(next.run(request).await)
}

async fn metrics(State(shared): App) -> impl IntoResponse {
    (
        [(
            header::CONTENT_TYPE,
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
        )],
        shared.metrics.encode(),
    )
}

/// A module's id and interface.
fn describe_module(id: &str, found: &Found) -> Value {
    let module = &found.module;
    let exports: Vec<Value> = module
        .exports()
        .map(|e| json!({"name": e.name, "type": e.ty.to_string()}))
        .collect();
    let imports: Vec<Value> = module
        .imports()
        .map(|i| {
            let ty = module.import_type(&i).to_string();
            json!({"module": i.module, "name": i.name, "type": ty})
        })
        .collect();
    json!({"id": id, "exports": exports, "imports": imports})
}

/// A component's id, and what it serves (its exported functions, where known).
fn describe_component(id: &str, component: Option<&ephem::component::Component>) -> Value {
    let exports: Vec<Value> = (component.iter())
        .flat_map(|c| c.exported_funcs())
        .map(|(path, _)| json!(path.join("#")))
        .collect();
    json!({"id": id, "kind": "component", "exports": exports, "http": format!("/modules/{id}/http/")})
}

/// Where an uploaded component's standard output and error go: nowhere (a tenant's output is
/// not the server's log).
const UPLOADED_OUTPUT: ephem_wasi::Output = ephem_wasi::Output::Discard;

fn count_artifact(shared: &Shared, found: &Found) {
    count_outcome(shared, found.origin.label());
}

/// Counts how a module was made ready: `open` (kept open from an earlier call), or its
/// artifact's outcome.
fn count_outcome(shared: &Shared, outcome: &str) {
    (shared
        .metrics
        .artifacts
        .get_or_create(&vec![("outcome", outcome.to_owned())]))
    .inc();
}

/// Runs `f` on a blocking thread.
async fn blocking<R: Send + 'static>(
    f: impl FnOnce() -> R + Send + 'static,
) -> Result<R, ApiError> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, "internal", e))
}

async fn upload(State(shared): App, Body(wasm): Body) -> Result<Response, ApiError> {
    let permit = shared.compiles.clone().acquire_owned().await;
    let s = shared.clone();
    if ephem::component::Component::is_component(&wasm) {
        let (id, component, created) = blocking(move || {
            let _permit = permit;
            let mut made = None;
            let put = (s.registry).put_component(&wasm, |component| {
                let engine = s.registry.engine();
                made = Some(Handler::from_component(engine, component, UPLOADED_OUTPUT)?);
                Ok(())
            });
            let (id, component, created) = put?;
            if let (Some(handler), Some(p)) = (made, &s.prepared_components) {
                lock(p).put(id.clone(), Arc::new(handler));
            }
            Ok::<_, RegistryError>((id, component, created))
        })
        .await??;
        let status = if created {
            StatusCode::CREATED
        } else {
            StatusCode::OK
        };
        return Ok((status, Json(describe_component(&id, Some(&component)))).into_response());
    }
    let (id, found, created) = blocking(move || {
        let _permit = permit;
        (s.registry).put(&wasm, |module| {
            s.exec.prepare(module).map(drop).map_err(|e| e.to_string())
        })
    })
    .await??;
    count_artifact(&shared, &found);
    let status = if created {
        StatusCode::CREATED
    } else {
        StatusCode::OK
    };
    Ok((status, Json(describe_module(&id, &found))).into_response())
}

async fn describe(State(shared): App, Path(id): Path<String>) -> Result<Response, ApiError> {
    let s = shared.clone();
    let id2 = id.clone();
    if blocking(move || s.registry.is_component(&id2)).await? {
        return Ok(Json(describe_component(&id, None)).into_response());
    }
    let s = shared.clone();
    let (id, found) = blocking(move || s.registry.module(&id).map(|f| (id, f))).await??;
    count_artifact(&shared, &found);
    Ok(Json(describe_module(&id, &found)).into_response())
}

async fn remove(State(shared): App, Path(id): Path<String>) -> Result<StatusCode, ApiError> {
    let s = shared.clone();
    let deleted = blocking(move || {
        let deleted = s.registry.delete(&id);
        if let Some(prepared) = &s.prepared {
            lock(prepared).pop(&id);
        }
        if let Some(prepared) = &s.prepared_components {
            lock(prepared).pop(&id);
        }
        deleted
    });
    match deleted.await?? {
        true => Ok(StatusCode::NO_CONTENT),
        false => Err(ApiError::new(
            StatusCode::NOT_FOUND,
            "not_found",
            "no such module",
        )),
    }
}

/// The query of a call: lowered limits, and for commands their arguments and environment.
#[derive(Default)]
struct CallQuery {
    limits: Requested,
    args: Vec<String>,
    env: Vec<(String, String)>,
    input: Option<String>,
}

fn parse_query(raw: Option<&str>, command: bool) -> Result<CallQuery, ApiError> {
    let bad = |m: String| ApiError::new(StatusCode::BAD_REQUEST, "bad_request", m);
    let pairs: Vec<(String, String)> =
        serde_urlencoded::from_str(raw.unwrap_or("")).map_err(|e| bad(e.to_string()))?;
    let mut q = CallQuery::default();
    for (k, v) in pairs {
        let number = |v: &str| {
            v.parse::<u64>()
                .map_err(|_| bad(format!("`{k}={v}`: expected a number")))
        };
        let size = |v: &str| ephem::units::parse_size(v).map_err(|e| bad(format!("`{k}`: {e}")));
        match k.as_str() {
            "fuel" => q.limits.fuel = Some(number(&v)?),
            "timeout_ms" => q.limits.timeout_ms = Some(number(&v)?),
            "timeout" => {
                let d = ephem::units::parse_duration(&v).map_err(|e| bad(format!("`{k}`: {e}")))?;
                q.limits.timeout_ms = Some(u64::try_from(d.as_millis()).unwrap_or(u64::MAX).max(1));
            }
            "max_memory" => q.limits.max_memory = Some(size(&v)?),
            "max_output" => {
                q.limits.max_output = Some(usize::try_from(size(&v)?).unwrap_or(usize::MAX))
            }
            "arg" if command => q.args.push(v),
            "input" if command => q.input = Some(v),
            "env" if command => match v.split_once('=') {
                Some((name, value)) => q.env.push((name.to_owned(), value.to_owned())),
                None => return Err(bad(format!("`env={v}`: expected NAME=VALUE"))),
            },
            _ => return Err(bad(format!("unknown query parameter `{k}`"))),
        }
    }
    Ok(q)
}

/// The server's worker pool, for routes an embedder mounts beside the server's own: work
/// handed to it waits, runs and is refused (`503`) exactly as calls are.
#[derive(Clone)]
pub struct Workers(pub(crate) Arc<Shared>);

impl Workers {
    /// Runs `f` on a worker: at once if one is free, after a wait if the queue has room, else
    /// `503` with `Retry-After`.
    pub async fn run<R: Send + 'static>(
        &self,
        f: impl FnOnce() -> R + Send + 'static,
    ) -> Result<R, ApiError> {
        on_worker(&self.0, f).await
    }
}

/// A request's body. A body past its route's limit is refused with `413` and a JSON error, as
/// every other error is (axum's own rejection is plain text).
pub struct Body(pub Bytes);

impl<S: Send + Sync> axum::extract::FromRequest<S> for Body {
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &S) -> Result<Body, ApiError> {
        match <Bytes as axum::extract::FromRequest<S>>::from_request(req, state).await {
            Ok(bytes) => Ok(Body(bytes)),
            Err(e) if e.status() == StatusCode::PAYLOAD_TOO_LARGE => Err(ApiError::new(
                e.status(),
                "too_large",
                format!(
                    "the body is larger than this route's limit ({})",
                    e.body_text()
                ),
            )),
            Err(e) => Err(ApiError::new(e.status(), "bad_request", e.body_text())),
        }
    }
}

/// An extractor that refuses a call with `503` when the server is full, before its body is
/// read: refusals stay cheap under overload however large the bodies. It holds no place (a
/// client sending its body slowly must not keep one from others), so a call that finds room
/// here may still be refused once its body has arrived.
pub struct Room;

impl axum::extract::FromRequestParts<Arc<Shared>> for Room {
    type Rejection = ApiError;

    async fn from_request_parts(
        _: &mut axum::http::request::Parts,
        shared: &Arc<Shared>,
    ) -> Result<Room, ApiError> {
        match shared.admitted.available_permits() {
            0 => Err(busy(shared)),
            _ => Ok(Room),
        }
    }
}

/// The answer to a call the server has no room for (counted): `503` with `Retry-After`.
fn busy(shared: &Shared) -> ApiError {
    shared.metrics.rejected.inc();
    ApiError {
        retry_after: true,
        ..ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "busy",
            "every worker is busy and the queue is full",
        )
    }
}

/// Runs `f` on a worker: at once if one is free, after a wait if the queue has room, else
/// `503` with `Retry-After` (latency does not grow without bound under overload).
pub(crate) async fn on_worker<R: Send + 'static>(
    shared: &Arc<Shared>,
    f: impl FnOnce() -> R + Send + 'static,
) -> Result<R, ApiError> {
    let running = start_on_worker(shared, |_place| f()).await?;
    running
        .await
        .map_err(|e| ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, "internal", e))
}

/// A call's place in the server: its worker and its admission, given back when dropped.
pub(crate) struct Place {
    _worker: Result<tokio::sync::OwnedSemaphorePermit, tokio::sync::AcquireError>,
    admission: Option<tokio::sync::OwnedSemaphorePermit>,
    shared: Arc<Shared>,
}

impl Place {
    /// The admission alone, to give back before the call ends: a call whose response is
    /// complete still holds its worker until it returns, but no longer counts against the
    /// queue, so that the client's next request waits for the worker instead of being refused.
    pub(crate) fn take_admission(&mut self) -> Option<tokio::sync::OwnedSemaphorePermit> {
        self.admission.take()
    }
}

impl Drop for Place {
    fn drop(&mut self) {
        self.shared.metrics.busy.dec();
    }
}

/// As [`on_worker`], returning once `f` has a worker (or was refused): `f` then runs on
/// whether or not its handle is awaited. `f` holds its [`Place`], and may give its admission
/// back before it returns.
pub(crate) async fn start_on_worker<R: Send + 'static>(
    shared: &Arc<Shared>,
    f: impl FnOnce(Place) -> R + Send + 'static,
) -> Result<tokio::task::JoinHandle<R>, ApiError> {
    let t = Instant::now();
    // Admission is one permit of `workers + queue`, held until the work is done: a call that
    // has been handed a worker but not yet woken up still counts once, not as waiting too.
    let Ok(admitted) = shared.admitted.clone().try_acquire_owned() else {
        return Err(busy(shared));
    };
    shared.metrics.queued.inc();
    let permit = shared.workers.clone().acquire_owned().await;
    shared.metrics.queued.dec();
    shared.metrics.phase("queue", t.elapsed());
    let s = shared.clone();
    Ok(tokio::task::spawn_blocking(move || {
        s.metrics.busy.inc();
        f(Place {
            _worker: permit,
            admission: Some(admitted),
            shared: s,
        })
    }))
}

/// A cache of prepared modules or components, locked (a panic while it was held left it
/// consistent: its operations do not unwind midway).
fn lock<V>(p: &Mutex<LruCache<String, V>>) -> std::sync::MutexGuard<'_, LruCache<String, V>> {
    p.lock().unwrap_or_else(|e| e.into_inner())
}

/// Module `id` ready for a call: kept open from an earlier call (while its wasm is still kept:
/// a module deleted through another node is not called), else opened (or compiled) and
/// linked. Records how.
fn open(shared: &Shared, id: &str) -> Result<InstancePre<Host>, ApiError> {
    let t = Instant::now();
    if let Some(p) = &shared.prepared {
        let kept = lock(p).get(id).cloned();
        if let Some(pre) = kept {
            if shared.registry.is_kept(id) {
                shared.metrics.phase("open", t.elapsed());
                count_outcome(shared, "open");
                return Ok(pre);
            }
            // Deleted through another node: let its artifact go now, not on eviction.
            lock(p).pop(id);
        }
    }
    // (Only on the way to compiling: a module kept open is never a component.)
    if shared.registry.is_component(id) {
        return Err(ApiError::new(
            StatusCode::BAD_REQUEST,
            "not_a_module",
            format!("{id} is a component: call it at /modules/{id}/http/"),
        ));
    }
    let found = shared.registry.module(id)?;
    count_artifact(shared, &found);
    let pre = shared.exec.prepare(&found.module)?;
    if let Some(p) = &shared.prepared {
        lock(p).put(id.to_owned(), pre.clone());
    }
    shared.metrics.phase("open", t.elapsed());
    Ok(pre)
}

/// Records a call's consumption and, for a trap, its kind; returns its outcome as an answer's.
fn account<R>(
    shared: &Shared,
    outcome: Result<(R, Measured), (CallError, Measured)>,
) -> Result<(R, Measured), ApiError> {
    let m = &shared.metrics;
    let (Ok((_, measured)) | Err((_, measured))) = &outcome;
    m.fuel.inc_by(measured.fuel_used);
    m.phase("instantiate", measured.instantiate);
    m.phase("call", measured.call);
    if let Err((CallError::Trap { kind, .. }, _)) = &outcome {
        (m.traps.get_or_create(&vec![("kind", format!("{kind:?}"))])).inc();
    }
    outcome.map_err(|(e, _)| e.into())
}

async fn invoke(
    State(shared): App,
    Path((id, export)): Path<(String, String)>,
    RawQuery(query): RawQuery,
    _: Room,
    Body(body): Body,
) -> Result<Response, ApiError> {
    let query = parse_query(query.as_deref(), false)?;
    let args: Vec<Value> = if body.iter().all(u8::is_ascii_whitespace) {
        Vec::new()
    } else {
        serde_json::from_slice(&body).map_err(|e| {
            ApiError::new(
                StatusCode::BAD_REQUEST,
                "bad_request",
                format!("the body must be a JSON array of arguments: {e}"),
            )
        })?
    };
    let limits = shared.config.limits.lowered(&query.limits);
    let s = shared.clone();
    let outcome = on_worker(&shared, move || {
        let pre = open(&s, &id)?;
        let t = Instant::now();
        let (results, measured) = account(&s, s.exec.invoke(&pre, &export, &args, &limits))?;
        let elapsed = t.elapsed();
        Ok::<_, ApiError>(json!({
            "results": results,
            "fuel_used": measured.fuel_used,
            "time_us": elapsed.as_micros() as u64,
        }))
    })
    .await??;
    Ok(Json(outcome).into_response())
}

async fn run(
    State(shared): App,
    Path(id): Path<String>,
    RawQuery(query): RawQuery,
    _: Room,
    Body(body): Body,
) -> Result<Response, ApiError> {
    let query = parse_query(query.as_deref(), true)?;
    let limits = shared.config.limits.lowered(&query.limits);
    let s = shared.clone();
    let (ran, measured, elapsed) = on_worker(&shared, move || {
        let pre = open(&s, &id)?;
        let t = Instant::now();
        let input = match &query.input {
            Some(name) => Ok(InputFile { name, bytes: &body }),
            None => Err(&body[..]),
        };
        let ran = (s.exec).run(&pre, input, &query.args, &query.env, &limits);
        let (ran, measured) = account(&s, ran)?;
        Ok::<_, ApiError>((ran, measured, t.elapsed()))
    })
    .await??;
    let stderr = percent_encoding::percent_encode(&ran.stderr, percent_encoding::NON_ALPHANUMERIC)
        .to_string();
    let mut response = ran.stdout.into_response();
    let h = response.headers_mut();
    let mut set = |name: &'static str, value: String| {
        if let Ok(v) = HeaderValue::from_str(&value) {
            h.insert(name, v);
        }
    };
    set("x-ephem-exit-code", ran.exit_code.to_string());
    set("x-ephem-fuel-used", measured.fuel_used.to_string());
    set("x-ephem-time-us", (elapsed.as_micros() as u64).to_string());
    set("x-ephem-stderr", stderr);
    if ran.stderr_dropped > 0 {
        set("x-ephem-stderr-dropped", ran.stderr_dropped.to_string());
    }
    Ok(response)
}

/// Component `id` ready to serve: kept open from an earlier request (while its wasm is still
/// kept), else compiled from its wasm (its modules' artifacts from the store) and linked.
fn open_component(shared: &Shared, id: &str) -> Result<Arc<Handler>, ApiError> {
    if let Some(p) = &shared.prepared_components {
        let kept = lock(p).get(id).cloned();
        if let Some(handler) = kept {
            if shared.registry.is_kept(id) {
                return Ok(handler);
            }
            lock(p).pop(id);
        }
    }
    if !shared.registry.is_component(id) && shared.registry.is_kept(id) {
        return Err(ApiError::new(
            StatusCode::BAD_REQUEST,
            "not_a_component",
            format!("{id} is a module: call it with /modules/{id}/invoke or /run"),
        ));
    }
    let component = shared.registry.component(id)?;
    let handler = Handler::from_component(shared.registry.engine(), &component, UPLOADED_OUTPUT)
        .map_err(|why| ApiError::new(StatusCode::BAD_REQUEST, "invalid", why))?;
    let handler = Arc::new(handler);
    if let Some(p) = &shared.prepared_components {
        lock(p).put(id.to_owned(), handler.clone());
    }
    Ok(handler)
}

async fn http_root(State(shared): App, Path(id): Path<String>, request: Request) -> Response {
    http_call(shared, id, String::new(), request).await
}

async fn http_path(
    State(shared): App,
    Path((id, path)): Path<(String, String)>,
    request: Request,
) -> Response {
    http_call(shared, id, path, request).await
}

/// A request to uploaded component `id`, which sees the path past `/modules/{id}/http`.
async fn http_call(shared: Arc<Shared>, id: String, path: String, request: Request) -> Response {
    let query = request
        .uri()
        .query()
        .map(|q| format!("?{q}"))
        .unwrap_or_default();
    let id_shown = id.clone();
    let s = shared.clone();
    // A component not kept open is compiled: within the server's compile pool.
    let kept = (shared.prepared_components.as_ref()).is_some_and(|p| lock(p).contains(&id));
    let permit = match kept {
        true => None,
        false => Some(shared.compiles.clone().acquire_owned().await),
    };
    let handler = match blocking(move || {
        let _permit = permit;
        open_component(&s, &id)
    })
    .await
    {
        Ok(Ok(handler)) => handler,
        Ok(Err(e)) | Err(e) => return e.into_response(),
    };
    // The path as the client sent it (not percent-decoded, as axum's `path` is), past the
    // route's prefix.
    let prefix = format!("/modules/{id_shown}/http");
    let seen = match request.uri().path().strip_prefix(&prefix) {
        Some("") => format!("/{query}"),
        Some(rest) if rest.starts_with('/') => format!("{rest}{query}"),
        _ => format!("/{path}{query}"),
    };
    match crate::component::answer(shared, handler, request, Some(seen)).await {
        Ok(response) => response,
        Err(e) => e.into_response(),
    }
}
