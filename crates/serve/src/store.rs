//! The fleet's object store: how nodes that share no directory share modules and artifacts.
//!
//! A bucket (`object_store`: S3, GCS, Azure with the `cloud` feature; a local directory or
//! memory always) holds every uploaded module at `modules/ID.wasm` and compiled artifacts at
//! `artifacts/KEY.ephem`, sealed with the fleet's artifact key. It sits behind each node's own
//! directories, which stay: an instance's memory image is mapped straight from the artifact
//! file, so every call needs it on local disk.
//!
//! - **The bucket is the record.** An upload is answered once its wasm is in the bucket; a
//!   `DELETE` removes it there.
//! - **A node's directories are its copies.** A node that is asked for a module it does not
//!   hold fetches it (its hash must be its id) and its artifact (which must verify with the
//!   fleet key, or is compiled again and replaced); what a node compiles it puts to the bucket,
//!   so a module is compiled once for the fleet.
//! - **Deletes reach every node within the recheck interval** (`object_store_recheck_secs`): a
//!   node checks that a module it holds is still in the bucket (one `HEAD`) when it last saw
//!   it longer ago than that, and forgets it when it is gone. If the bucket cannot be reached
//!   (or does not answer within [`CHECK_TIMEOUT`]), its copy is still served.
//! - **Leftovers**: an artifact put by a node that compiled a module while another deleted it
//!   stays in the bucket with no module; it is never used (a module uploaded again compiles to
//!   the same artifact). A lifecycle rule on `artifacts/` bounds such leftovers.
//!
//! The methods that talk to the bucket block on the server's runtime: call them off the async
//! threads.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use lru::LruCache;
use object_store::path::Path;
use object_store::{ObjectStore, ObjectStoreExt, PutPayload};

/// How many modules' last sightings a node remembers; one it forgot is checked again.
const SIGHTINGS: usize = 1 << 16;

/// How long a check that a held module is still in the bucket may take before the node serves
/// its copy anyway (the store's own retries could otherwise hold a call for minutes).
pub const CHECK_TIMEOUT: Duration = Duration::from_secs(2);

/// How long fetching, putting or deleting an object may take.
pub const TRANSFER_TIMEOUT: Duration = Duration::from_secs(120);

/// The object store of a fleet, as one node uses it.
pub struct Bucket {
    objects: Arc<dyn ObjectStore>,
    runtime: tokio::runtime::Handle,
    recheck: Duration,
    /// When each module this node holds was last seen in the bucket.
    seen: Mutex<LruCache<String, Instant>>,
}

/// The object store a URL names, under the URL's path: `s3://bucket/prefix`, `gs://…`,
/// `az://…` (with the `cloud` feature), `file:///dir`, `memory:///`. Credentials and other
/// options come from the environment, as each backend documents (`AWS_ACCESS_KEY_ID`, …).
pub fn open_url(url: &str) -> anyhow::Result<Arc<dyn ObjectStore>> {
    let parsed = url::Url::parse(url).map_err(|e| anyhow::anyhow!("object store {url}: {e}"))?;
    let options = std::env::vars().map(|(k, v)| (k.to_ascii_lowercase(), v));
    let (store, prefix) = object_store::parse_url_opts(&parsed, options).map_err(|e| {
        let hint = match parsed.scheme() {
            "file" | "memory" => "",
            _ if cfg!(feature = "cloud") => "",
            _ => " (S3, GCS and Azure need ephem built with `--features cloud`)",
        };
        anyhow::anyhow!("object store {url}: {e}{hint}")
    })?;
    Ok(Arc::new(object_store::prefix::PrefixStore::new(
        store, prefix,
    )))
}

impl Bucket {
    /// `objects` used from `runtime`; modules held are checked again after `recheck`.
    pub fn new(
        objects: Arc<dyn ObjectStore>,
        runtime: tokio::runtime::Handle,
        recheck: Duration,
    ) -> Bucket {
        let capacity = std::num::NonZeroUsize::new(SIGHTINGS).expect("a positive capacity");
        Bucket {
            objects,
            runtime,
            recheck,
            seen: Mutex::new(LruCache::new(capacity)),
        }
    }

    fn module_path(id: &str) -> Path {
        Path::from(format!("modules/{id}.wasm"))
    }

    fn artifact_path(key: &str) -> Path {
        Path::from(format!("artifacts/{key}.ephem"))
    }

    fn sightings(&self) -> std::sync::MutexGuard<'_, LruCache<String, Instant>> {
        self.seen.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Records that module `id` is in the bucket now.
    pub fn saw(&self, id: &str) {
        self.sightings().put(id.to_owned(), Instant::now());
    }

    /// Whether module `id` was seen in the bucket within the recheck interval.
    pub fn seen_lately(&self, id: &str) -> bool {
        (self.sightings().get(id)).is_some_and(|t| t.elapsed() < self.recheck)
    }

    /// Forgets that module `id` was seen.
    pub fn forget(&self, id: &str) {
        self.sightings().pop(id);
    }

    /// The wasm of module `id`, if the bucket holds it.
    pub fn get_module(&self, id: &str) -> Result<Option<Vec<u8>>, String> {
        self.get(&Self::module_path(id))
    }

    /// Whether the bucket holds module `id`, asked for at most `limit`.
    pub fn has_module(&self, id: &str, limit: Duration) -> Result<bool, String> {
        let path = Self::module_path(id);
        let found = self.ask(limit, &path, self.objects.head(&path))?;
        Ok(found.is_some())
    }

    pub fn put_module(&self, id: &str, wasm: &[u8]) -> Result<(), String> {
        self.put(&Self::module_path(id), wasm)
    }

    /// The artifact stored under cache key `key`, if any.
    pub fn get_artifact(&self, key: &str) -> Result<Option<Vec<u8>>, String> {
        self.get(&Self::artifact_path(key))
    }

    pub fn put_artifact(&self, key: &str, bytes: &[u8]) -> Result<(), String> {
        self.put(&Self::artifact_path(key), bytes)
    }

    /// Removes module `id` and its artifact (cache key `key`); whether the module was there.
    pub fn delete(&self, id: &str, key: &str) -> Result<bool, String> {
        self.forget(id);
        let held = self.has_module(id, TRANSFER_TIMEOUT)?;
        for path in [Self::module_path(id), Self::artifact_path(key)] {
            self.ask(TRANSFER_TIMEOUT, &path, self.objects.delete(&path))?;
        }
        Ok(held)
    }

    fn get(&self, path: &Path) -> Result<Option<Vec<u8>>, String> {
        let got = self.ask(TRANSFER_TIMEOUT, path, async {
            self.objects.get(path).await?.bytes().await
        })?;
        Ok(got.map(|bytes| bytes.to_vec()))
    }

    fn put(&self, path: &Path, bytes: &[u8]) -> Result<(), String> {
        let payload = PutPayload::from(bytes.to_vec());
        self.ask(TRANSFER_TIMEOUT, path, self.objects.put(path, payload))
            .map(drop)
    }

    /// What `request` (about the object at `path`) gives, run on the server's runtime for at
    /// most `limit`: `None` if there is no such object.
    fn ask<T>(
        &self,
        limit: Duration,
        path: &Path,
        request: impl std::future::Future<Output = object_store::Result<T>>,
    ) -> Result<Option<T>, String> {
        match self.runtime.block_on(tokio::time::timeout(limit, request)) {
            Ok(Ok(answer)) => Ok(Some(answer)),
            Ok(Err(object_store::Error::NotFound { .. })) => Ok(None),
            Ok(Err(e)) => Err(format!("the object store, {path}: {e}")),
            Err(_) => Err(format!(
                "the object store, {path}: no answer within {} s",
                limit.as_secs()
            )),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_name_their_store_or_say_why_not() {
        let dir = tempfile::tempdir().unwrap();
        assert!(open_url(&format!("file://{}", dir.path().display())).is_ok());
        assert!(open_url("memory:///").is_ok());
        let e = open_url("not a url").unwrap_err().to_string();
        assert!(e.contains("not a url"), "{e}");
        if !cfg!(feature = "cloud") {
            let e = open_url("s3://bucket/prefix").unwrap_err().to_string();
            assert!(e.contains("--features cloud"), "{e}");
        }
    }
}
