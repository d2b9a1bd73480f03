//! The guest's linear memory as host functions see it: every access bounds-checked, so a
//! pointer outside the memory is an `EFAULT` for the guest, never a fault in the host.
//!
//! Values are little-endian at any alignment, as wasm memory is.

use std::borrow::Cow;

use ephem_runtime::HostBytes;

use crate::abi::{Errno, IOVEC_SIZE};

/// What a host function returns to the guest on failure.
pub type Result<T, E = Errno> = std::result::Result<T, E>;

/// A borrowed linear memory. Writes go through [`HostBytes`], which marks them. A shared
/// memory's bytes are copied in and out rather than borrowed (see [`HostBytes`]), which is why
/// reads give `Cow`s and writes in place go through [`GuestMemory::fill`].
pub struct GuestMemory<'a>(pub(crate) HostBytes<'a>);

impl GuestMemory<'_> {
    fn range(&self, ptr: u32, len: u32) -> Result<std::ops::Range<usize>> {
        let start = ptr as usize;
        let end = start + len as usize;
        if end > self.0.len() {
            return Err(Errno::FAULT);
        }
        Ok(start..end)
    }

    /// `len` bytes at `ptr`.
    pub fn slice(&self, ptr: u32, len: u32) -> Result<Cow<'_, [u8]>> {
        let r = self.range(ptr, len)?;
        self.0.read(r).ok_or(Errno::FAULT)
    }

    /// Lets `fill` write the first bytes of the `len` at `ptr`, and returns how many it wrote:
    /// in place, or (in a shared memory) in a buffer of zeros whose first bytes, as many as it
    /// says, are then copied there.
    pub fn fill(
        &mut self,
        ptr: u32,
        len: u32,
        fill: impl FnOnce(&mut [u8]) -> Result<usize>,
    ) -> Result<usize> {
        let r = self.range(ptr, len)?;
        if let Some(bytes) = self.0.get_mut(r) {
            return fill(bytes);
        }
        let mut buffer = vec![0; len as usize];
        let n = fill(&mut buffer)?;
        self.write(ptr, &buffer[..n.min(buffer.len())])?;
        Ok(n)
    }

    /// Copies `bytes` to `ptr`.
    pub fn write(&mut self, ptr: u32, bytes: &[u8]) -> Result<()> {
        let len = u32::try_from(bytes.len()).map_err(|_| Errno::FAULT)?;
        let r = self.range(ptr, len)?;
        self.0.write(r.start, bytes).ok_or(Errno::FAULT)
    }

    fn array<const N: usize>(&self, ptr: u32) -> Result<[u8; N]> {
        Ok(self.slice(ptr, N as u32)?[..].try_into().expect("N bytes"))
    }

    pub fn u8(&self, ptr: u32) -> Result<u8> {
        Ok(self.array::<1>(ptr)?[0])
    }
    pub fn u16(&self, ptr: u32) -> Result<u16> {
        self.array(ptr).map(u16::from_le_bytes)
    }
    pub fn u32(&self, ptr: u32) -> Result<u32> {
        self.array(ptr).map(u32::from_le_bytes)
    }
    pub fn u64(&self, ptr: u32) -> Result<u64> {
        self.array(ptr).map(u64::from_le_bytes)
    }
    pub fn set_u32(&mut self, ptr: u32, v: u32) -> Result<()> {
        self.write(ptr, &v.to_le_bytes())
    }
    pub fn set_u64(&mut self, ptr: u32, v: u64) -> Result<()> {
        self.write(ptr, &v.to_le_bytes())
    }

    /// A `usize` count written as the guest's `size` (u32): counts never exceed the memory.
    pub fn set_size(&mut self, ptr: u32, n: usize) -> Result<()> {
        self.set_u32(ptr, n as u32)
    }

    /// The (pointer, length) pairs of an iovec array, each checked against the memory.
    pub fn iovecs(&self, iovs: u32, count: u32) -> Result<Vec<(u32, u32)>> {
        let bytes = count.checked_mul(IOVEC_SIZE).ok_or(Errno::FAULT)?;
        let raw = self.slice(iovs, bytes)?;
        raw.chunks_exact(IOVEC_SIZE as usize)
            .map(|c| {
                let ptr = u32::from_le_bytes(c[0..4].try_into().expect("4 bytes"));
                let len = u32::from_le_bytes(c[4..8].try_into().expect("4 bytes"));
                self.range(ptr, len).map(|_| (ptr, len))
            })
            .collect()
    }

    /// The bytes of a ciovec array, to write out (each checked by [`GuestMemory::iovecs`]).
    pub fn gather(&self, iovs: &[(u32, u32)]) -> Result<Vec<Cow<'_, [u8]>>> {
        iovs.iter().map(|&(p, l)| self.slice(p, l)).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accesses_past_the_end_are_faults_not_panics() {
        let mut bytes = vec![0u8; 16];
        let mut m = GuestMemory(HostBytes::new(&mut bytes));
        m.set_u64(8, u64::MAX).unwrap();
        assert_eq!(m.u64(8), Ok(u64::MAX));
        assert_eq!(m.u64(9), Err(Errno::FAULT));
        assert_eq!(m.u32(u32::MAX), Err(Errno::FAULT));
        assert_eq!(m.slice(16, 0).map(|s| s.len()), Ok(0));
        assert_eq!(m.slice(17, 0).err(), Some(Errno::FAULT));
        // An iovec array whose byte size overflows, and one pointing outside.
        assert_eq!(m.iovecs(0, u32::MAX).err(), Some(Errno::FAULT));
        m.set_u32(0, 12).unwrap();
        m.set_u32(4, 8).unwrap();
        assert_eq!(m.iovecs(0, 1).err(), Some(Errno::FAULT));
        m.set_u32(4, 4).unwrap();
        assert_eq!(m.iovecs(0, 1), Ok(vec![(12, 4)]));
    }
}
