//! Helpers shared by the code-memory tests: tiny x86_64 functions and a way to run them.

#![allow(dead_code)]

use ephem_code_memory::{CodePool, Error, LoadedCode, PoolConfig, Strategy};

/// `mov eax, value; ret`.
pub fn ret_value(value: u32) -> [u8; 6] {
    let v = value.to_le_bytes();
    [0xB8, v[0], v[1], v[2], v[3], 0xC3]
}

/// A module of `len` bytes (`int3` everywhere) with a `ret_value` function at each offset.
pub fn module(len: usize, functions: &[(usize, u32)]) -> Vec<u8> {
    let mut bytes = vec![0xCC; len];
    for &(offset, value) in functions {
        bytes[offset..offset + 6].copy_from_slice(&ret_value(value));
    }
    bytes
}

/// Writes `bytes` into a fresh slot of `pool` and publishes it.
pub fn load(pool: &CodePool, bytes: &[u8]) -> Result<LoadedCode, Error> {
    let mut slot = pool.acquire(bytes.len())?;
    slot.bytes_mut().copy_from_slice(bytes);
    slot.publish()
}

/// Calls the function at `offset` of published code.
pub fn call(code: &LoadedCode, offset: usize) -> u32 {
    assert!(offset + 6 <= code.len());
    // SAFETY: every test places a complete `mov eax, imm32; ret` at the offsets it calls.
    let f: extern "C" fn() -> u32 = unsafe { std::mem::transmute(code.as_ptr().add(offset)) };
    f()
}

/// A pool under `strategy`, or `None` (with the reason printed) where the system cannot provide
/// it, as `hugetlb` without a huge page pool.
pub fn pool_or_skip(config: PoolConfig) -> Option<CodePool> {
    match CodePool::new(config) {
        Ok(pool) => Some(pool),
        Err(e @ Error::Unavailable { .. }) => {
            eprintln!("skipped: {e}");
            None
        }
        Err(e) => panic!("cannot build pool: {e}"),
    }
}

/// Every strategy that keeps W^X.
pub fn w_xor_x_strategies() -> impl Iterator<Item = Strategy> {
    Strategy::ALL.into_iter().filter(|s| *s != Strategy::Rwx)
}

/// The permission strings of this process's mappings that are writable and executable.
pub fn writable_executable_mappings() -> Vec<String> {
    let maps = std::fs::read_to_string("/proc/self/maps").expect("read /proc/self/maps");
    maps.lines()
        .filter(|line| {
            let perms = line.split_whitespace().nth(1).unwrap_or("");
            perms.contains('w') && perms.contains('x')
        })
        .map(str::to_owned)
        .collect()
}
