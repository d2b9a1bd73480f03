//! The deployment's artifact key: the secret under which artifacts are sealed.
//!
//! An artifact's integrity code is a keyed BLAKE3 of the whole file. Anyone who can write an
//! artifact can recompute an unkeyed hash, so only a key makes the code mean "written by this
//! deployment": opening for execution checks it, and a file that does not verify is refused.
//!
//! A key is 32 random bytes, kept in a file as 64 hex digits. The cache makes one in its
//! directory on first use (mode 0600, see [`ArtifactKey::load_or_create`]); a fleet that shares
//! artifacts gives every node the same key file. A key file that another user could write is
//! refused: whoever can change the key can seal code of their own.

use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::sync::OnceLock;

use crate::Error;

/// A 256-bit key for sealing and verifying artifacts.
#[derive(Clone)]
pub struct ArtifactKey {
    bytes: [u8; 32],
    /// See [`ArtifactKey::id`]; made on first use (opening a known file asks for it).
    id: OnceLock<KeyId>,
}

impl PartialEq for ArtifactKey {
    fn eq(&self, other: &ArtifactKey) -> bool {
        self.bytes == other.bytes
    }
}

impl Eq for ArtifactKey {}

/// A short name for a key that reveals nothing of it: what a process remembers of the key a file
/// was verified with.
pub(crate) type KeyId = u64;

impl std::fmt::Debug for ArtifactKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ArtifactKey(..)")
    }
}

fn key_error(path: &Path, why: impl std::fmt::Display) -> Error {
    Error::Key(format!("{}: {why}", path.display()))
}

impl ArtifactKey {
    /// The key with these bytes.
    pub const fn from_bytes(bytes: [u8; 32]) -> ArtifactKey {
        ArtifactKey {
            bytes,
            id: OnceLock::new(),
        }
    }

    pub(crate) fn bytes(&self) -> &[u8; 32] {
        &self.bytes
    }

    /// See [`KeyId`]: the start of a hash keyed with the key.
    pub(crate) fn id(&self) -> KeyId {
        *self.id.get_or_init(|| {
            let h = blake3::keyed_hash(&self.bytes, b"ephem artifact key id");
            u64::from_le_bytes(h.as_bytes()[..8].try_into().expect("8 bytes"))
        })
    }

    /// A fresh random key.
    pub fn generate() -> std::io::Result<ArtifactKey> {
        let mut bytes = [0u8; 32];
        let mut filled = 0;
        while filled < bytes.len() {
            filled += rustix::rand::getrandom(
                &mut bytes[filled..],
                rustix::rand::GetRandomFlags::empty(),
            )
            .map_err(std::io::Error::from)?;
        }
        Ok(ArtifactKey::from_bytes(bytes))
    }

    /// The key as 64 lowercase hex digits (what a key file holds).
    pub fn to_hex(&self) -> String {
        blake3::Hash::from_bytes(self.bytes).to_hex().to_string()
    }

    /// Reads a key file: 64 hex digits, surrounding whitespace allowed. The file must be a
    /// regular file that no other user can write (owned by this user or root, no group or
    /// other write permission).
    pub fn from_file(path: &Path) -> Result<ArtifactKey, Error> {
        let meta = std::fs::metadata(path).map_err(|e| key_error(path, e))?;
        if !meta.is_file() {
            return Err(key_error(path, "not a regular file"));
        }
        if meta.mode() & 0o022 != 0 || !crate::owner::ours_or_roots(meta.uid()) {
            return Err(key_error(
                path,
                "another user could change this key file (it must belong to this user or root \
                 and not be writable by group or others)",
            ));
        }
        let text = std::fs::read_to_string(path).map_err(|e| key_error(path, e))?;
        let hash = blake3::Hash::from_hex(text.trim())
            .map_err(|_| key_error(path, "not a key (64 hex digits)"))?;
        Ok(ArtifactKey::from_bytes(*hash.as_bytes()))
    }

    /// Reads the key file at `path`, or creates it with a fresh key (mode 0600) if there is
    /// none. Processes that create it at once agree on one key: each writes a complete
    /// temporary file and hard-links it into place, and a loser reads the winner's.
    pub fn load_or_create(path: &Path) -> Result<ArtifactKey, Error> {
        // Decided by whether anything is there, not by why reading failed: a reader that lost a
        // race to a creator must not report the creator's file as missing.
        if std::fs::symlink_metadata(path).is_ok() {
            return ArtifactKey::from_file(path);
        }
        let dir = path.parent().unwrap_or(Path::new("."));
        std::fs::create_dir_all(dir).map_err(|e| key_error(dir, e))?;
        let key = ArtifactKey::generate().map_err(|e| key_error(path, e))?;
        let line = format!("{}\n", key.to_hex());
        let temp = crate::cache::write_temp(path, line.as_bytes(), 0o600)
            .map_err(|e| key_error(path, e))?;
        let written = std::fs::hard_link(&temp, path);
        let _ = std::fs::remove_file(&temp);
        match written {
            Ok(()) => Ok(key),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => ArtifactKey::from_file(path),
            Err(e) => Err(key_error(path, e)),
        }
    }
}
