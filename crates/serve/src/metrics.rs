//! What `GET /metrics` reports, in Prometheus's text format (through `prometheus-client`).

use std::sync::atomic::AtomicU64;

use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

type Labels = Vec<(&'static str, String)>;

/// The server's metrics.
pub struct Metrics {
    registry: Registry,
    /// Requests by route (the matched pattern) and status.
    pub requests: Family<Labels, Counter>,
    /// Seconds per phase of a call (`queue`, `open`, `instantiate`, `call`) and per request.
    pub phases: Family<Labels, Histogram>,
    /// Traps by kind.
    pub traps: Family<Labels, Counter>,
    /// Fuel consumed by calls.
    pub fuel: Counter<u64, AtomicU64>,
    /// Artifacts by how they were had: `hit` (opened), `compiled`, `uncached` (compiled, not
    /// stored).
    pub artifacts: Family<Labels, Counter>,
    /// Calls running.
    pub busy: Gauge,
    /// Calls waiting for a worker.
    pub queued: Gauge,
    /// Requests answered `503` because the queue was full.
    pub rejected: Counter,
}

impl Default for Metrics {
    fn default() -> Metrics {
        let mut registry = Registry::with_prefix("ephem");
        let requests = Family::<Labels, Counter>::default();
        let phases = Family::<Labels, Histogram>::new_with_constructor(|| {
            // 10 µs to about 40 s.
            Histogram::new(exponential_buckets(1e-5, 4.0, 12))
        });
        let traps = Family::<Labels, Counter>::default();
        let fuel = Counter::<u64, AtomicU64>::default();
        let artifacts = Family::<Labels, Counter>::default();
        let (busy, queued, rejected) = (Gauge::default(), Gauge::default(), Counter::default());
        registry.register(
            "requests",
            "HTTP requests by route and status",
            requests.clone(),
        );
        registry.register(
            "phase_seconds",
            "Time per phase of a request",
            phases.clone(),
        );
        registry.register("traps", "Guest traps by kind", traps.clone());
        registry.register("fuel_consumed", "Fuel consumed by calls", fuel.clone());
        registry.register(
            "artifacts",
            "Modules made ready for calls, by outcome: open (kept open), hit, fetched (from the object store), compiled, uncached",
            artifacts.clone(),
        );
        registry.register("workers_busy", "Calls running", busy.clone());
        registry.register("queue_depth", "Calls waiting for a worker", queued.clone());
        registry.register(
            "rejected",
            "Calls refused with 503 (queue full)",
            rejected.clone(),
        );
        Metrics {
            registry,
            requests,
            phases,
            traps,
            fuel,
            artifacts,
            busy,
            queued,
            rejected,
        }
    }
}

impl Metrics {
    /// Records `seconds` for `phase`.
    pub fn phase(&self, phase: &'static str, d: std::time::Duration) {
        (self
            .phases
            .get_or_create(&vec![("phase", phase.to_owned())]))
        .observe(d.as_secs_f64());
    }

    /// The text exposition.
    pub fn encode(&self) -> String {
        let mut out = String::new();
        prometheus_client::encoding::text::encode(&mut out, &self.registry)
            .expect("writing to a String cannot fail");
        out
    }
}
