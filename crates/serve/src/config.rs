//! The server's configuration (a TOML file, with command-line flags over it) and the limits
//! every request runs under.
//!
//! The configured [`Limits`] are ceilings: a request may ask for less (`?fuel=`, `?timeout_ms=`,
//! `?max_memory=`, `?max_output=`), never for more ([`Limits::lowered`]).

use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Deserializer};

/// A size in a configuration file: a number of bytes, or a string in any form
/// [`ephem::units::parse_size`] accepts.
fn size<'de, D: Deserializer<'de>, T: TryFrom<u64>>(d: D) -> Result<T, D::Error> {
    use serde::de::Error;
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Raw {
        Bytes(u64),
        Text(String),
    }
    let bytes = match Raw::deserialize(d)
        .map_err(|_| D::Error::custom(format!("expected {}", ephem::units::SIZE_FORMS)))?
    {
        Raw::Bytes(n) => n,
        Raw::Text(s) => ephem::units::parse_size(&s).map_err(D::Error::custom)?,
    };
    T::try_from(bytes).map_err(|_| D::Error::custom(format!("{bytes} bytes is too large")))
}

/// Everything `ephem serve` is configured with. Every field has a default, so an empty file is
/// a valid configuration.
#[derive(Clone, Debug, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Config {
    /// Where to listen (default `127.0.0.1:8080`). A non-loopback address needs `token_file`.
    pub listen: SocketAddr,
    /// Where uploaded modules (`modules/`) and, by default, compiled artifacts (`artifacts/`)
    /// are kept, and commands' input files (`scratch/`, emptied at start). One node's own:
    /// share `modules_dir` and `artifacts_dir` instead.
    pub data_dir: PathBuf,
    /// The artifact store: a directory the nodes of a fleet share (default
    /// `DATA_DIR/artifacts`). With `modules_dir` shared too, a module uploaded to one node runs
    /// on all of them, compiled once.
    pub artifacts_dir: Option<PathBuf>,
    /// Where uploaded modules are kept (default `DATA_DIR/modules`); share it in a fleet.
    pub modules_dir: Option<PathBuf>,
    /// An object store the nodes of a fleet share modules and artifacts through, instead of
    /// shared directories: `s3://bucket/prefix`, `gs://…`, `az://…` (built with the `cloud`
    /// feature), `file:///dir`. Each node's own directories then hold its copies (see
    /// `ephem_serve::store`). Needs `artifact_key_file`: the fleet's key.
    pub object_store: Option<String>,
    /// How long a node serves a module it holds before checking it is still in the object
    /// store (default 10): a `DELETE` reaches every node within this.
    pub object_store_recheck_secs: u64,
    /// The fleet's artifact key (a file of 64 hex digits, writable by this user only): artifacts
    /// are sealed with it and only artifacts it verifies are run. Default: the `key` file in
    /// the artifact store, made on first use.
    pub artifact_key_file: Option<PathBuf>,
    /// Bound on the artifact store's size; least recently used artifacts go first (they are
    /// compiled again from the kept module when next called). A size: a number of bytes or a
    /// string such as `"1GiB"` (see `ephem::units`).
    #[serde(deserialize_with = "size")]
    pub artifacts_max_bytes: u64,
    /// A file holding the bearer token that uploads and calls must present.
    pub token_file: Option<PathBuf>,
    /// Calls running at once (default: the number of CPUs).
    pub workers: usize,
    /// Calls waiting for a worker before the server answers `503` (default: `workers`).
    pub queue: Option<usize>,
    /// Compiles running at once (default: half the CPUs, at least one).
    pub compile_workers: usize,
    /// Modules kept open for the calls that follow (default 256): each its artifact's file,
    /// metadata and resolved imports, never loaded code (every call still loads its code and
    /// instantiates afresh). `0`: every call opens its artifact.
    pub open_modules: usize,
    /// Accepts modules that import what this server does not provide, as `wasmtime run
    /// --trap-unknown-imports` does: such functions trap when called; memories, tables and
    /// globals are fresh ones of the declared types in every call. For modules built against
    /// another host (JavaScript glue, say) whose called exports do not use it. Default: off,
    /// and such uploads are refused, naming the import.
    pub trap_unknown_imports: bool,
    /// Logs a line per request (method, route, status, time) at `info`. Default: off, since
    /// writing it costs about a tenth of a small call's throughput; `/metrics` counts requests
    /// either way, and failures (`5xx`) are logged at `warn` always.
    pub access_log: bool,
    /// The ceilings of every call.
    pub limits: Limits,
}

impl Default for Config {
    fn default() -> Config {
        let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
        Config {
            listen: SocketAddr::from(([127, 0, 0, 1], 8080)),
            data_dir: PathBuf::from("ephem-data"),
            artifacts_dir: None,
            modules_dir: None,
            object_store: None,
            object_store_recheck_secs: 10,
            artifact_key_file: None,
            artifacts_max_bytes: 1 << 30,
            token_file: None,
            workers: cpus,
            queue: None,
            compile_workers: (cpus / 2).max(1),
            open_modules: 256,
            trap_unknown_imports: false,
            access_log: false,
            limits: Limits::default(),
        }
    }
}

impl Config {
    /// The configuration in the TOML file at `path`.
    pub fn from_file(path: &Path) -> anyhow::Result<Config> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| anyhow::anyhow!("reading {}: {e}", path.display()))?;
        toml::from_str(&text).map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))
    }

    /// The artifact store's directory.
    pub fn artifacts_dir(&self) -> PathBuf {
        (self.artifacts_dir.clone()).unwrap_or_else(|| self.data_dir.join("artifacts"))
    }

    /// Where commands' input files are made.
    pub fn scratch_dir(&self) -> PathBuf {
        self.data_dir.join("scratch")
    }

    /// The directory of uploaded modules.
    pub fn modules_dir(&self) -> PathBuf {
        (self.modules_dir.clone()).unwrap_or_else(|| self.data_dir.join("modules"))
    }

    /// Calls that may wait for a worker.
    pub fn queue(&self) -> usize {
        self.queue.unwrap_or(self.workers)
    }
}

/// What one call may take. Every field is a ceiling; see [`Limits::lowered`]. Sizes are a
/// number of bytes or a string such as `"2MiB"` (see `ephem::units`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Limits {
    /// Fuel per call (the default costs: about one per wasm operator).
    pub fuel: u64,
    /// Wall-clock time per call, instantiation included, in milliseconds.
    pub timeout_ms: u64,
    /// Bytes of linear memory per instance: `memory.grow` past it returns -1, and a module
    /// whose initial memory is larger fails with a limit error.
    #[serde(deserialize_with = "size")]
    pub max_memory: u64,
    /// Bytes of an uploaded module (larger: `413`).
    #[serde(deserialize_with = "size")]
    pub max_module: usize,
    /// Bytes of a call's request body (arguments, or a command's stdin; larger: `413`).
    #[serde(deserialize_with = "size")]
    pub max_input: usize,
    /// Bytes of a command's stdout kept (writes past it fail with `ENOSPC` in the guest);
    /// stderr keeps its first [`STDERR_BYTES`].
    #[serde(deserialize_with = "size")]
    pub max_output: usize,
}

/// Bytes of a command's stderr returned (in a header, so bounded small); the rest is dropped.
pub const STDERR_BYTES: usize = 4096;

impl Default for Limits {
    fn default() -> Limits {
        Limits {
            fuel: 10_000_000_000,
            timeout_ms: 10_000,
            max_memory: 256 << 20,
            max_module: 64 << 20,
            max_input: 16 << 20,
            max_output: 16 << 20,
        }
    }
}

/// Lower limits a request asks for (query parameters).
#[derive(Clone, Copy, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Requested {
    pub fuel: Option<u64>,
    pub timeout_ms: Option<u64>,
    pub max_memory: Option<u64>,
    pub max_output: Option<usize>,
}

impl Limits {
    /// These limits, lowered where `requested` asks for less; asking for more changes nothing.
    pub fn lowered(&self, requested: &Requested) -> Limits {
        let min = |ceiling: u64, asked: Option<u64>| asked.map_or(ceiling, |a| a.min(ceiling));
        Limits {
            fuel: min(self.fuel, requested.fuel),
            timeout_ms: min(self.timeout_ms, requested.timeout_ms),
            max_memory: min(self.max_memory, requested.max_memory),
            max_output: requested
                .max_output
                .map_or(self.max_output, |a| a.min(self.max_output)),
            ..*self
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_lower_limits_and_never_raise_them() {
        let ceiling = Limits::default();
        let asked = Requested {
            fuel: Some(5),
            timeout_ms: Some(u64::MAX),
            max_memory: None,
            max_output: Some(1),
        };
        let l = ceiling.lowered(&asked);
        assert_eq!(l.fuel, 5);
        assert_eq!(l.timeout_ms, ceiling.timeout_ms);
        assert_eq!(l.max_memory, ceiling.max_memory);
        assert_eq!(l.max_output, 1);
    }

    #[test]
    fn files_are_toml_with_defaults_and_unknown_keys_refused() {
        let c: Config = toml::from_str("workers = 3\n[limits]\nfuel = 7\n").unwrap();
        assert_eq!((c.workers, c.limits.fuel), (3, 7));
        assert_eq!(c.limits.timeout_ms, Limits::default().timeout_ms);
        assert_eq!(c.queue(), 3);
        assert!(toml::from_str::<Config>("wrokers = 3\n").is_err());
    }

    #[test]
    fn sizes_are_bytes_or_any_form_of_the_one_size_parser() {
        let c: Config = toml::from_str(
            "artifacts_max_bytes = \"1GiB\"\n[limits]\nmax_memory = \"2m\"\n\
             max_module = \"64KiB\"\nmax_input = 1024\nmax_output = \"3MiB\"\n",
        )
        .unwrap();
        assert_eq!(c.artifacts_max_bytes, 1 << 30);
        assert_eq!(c.limits.max_memory, 2 << 20);
        assert_eq!(c.limits.max_module, 64 << 10);
        assert_eq!(c.limits.max_input, 1024);
        assert_eq!(c.limits.max_output, 3 << 20);
        let e = toml::from_str::<Config>("[limits]\nmax_memory = \"2MB\"\n").unwrap_err();
        assert!(
            e.to_string().contains("MiB"),
            "the accepted forms are named: {e}"
        );
        let e = toml::from_str::<Config>("[limits]\nmax_memory = true\n").unwrap_err();
        assert!(
            e.to_string().contains("MiB"),
            "the accepted forms are named: {e}"
        );
    }

    /// The configuration the Kubernetes manifests ship is one the server accepts.
    #[test]
    fn the_kubernetes_configuration_is_valid() {
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../deploy/kubernetes/ephem.toml");
        let c = Config::from_file(&path).unwrap();
        assert!(!c.listen.ip().is_loopback() && c.token_file.is_some());
        assert_eq!(c.modules_dir(), Path::new("/store/modules"));
        assert_eq!(c.artifacts_dir(), Path::new("/store/artifacts"));
        assert!(c.object_store.is_none());

        let path = path.with_file_name("object-store/ephem.toml");
        let c = Config::from_file(&path).unwrap();
        assert!(!c.listen.ip().is_loopback() && c.token_file.is_some());
        assert!(
            c.artifact_key_file.is_some(),
            "an object store needs the fleet key"
        );
        let url = url::Url::parse(c.object_store.as_deref().unwrap()).unwrap();
        assert_eq!(url.scheme(), "s3");
        assert!(
            c.artifacts_dir().starts_with(&c.data_dir),
            "the pod's own copies"
        );
    }
}
