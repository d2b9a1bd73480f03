//! Functions generated code may call by absolute address (listed in a module's relocations).
//! Float rounding with WebAssembly semantics, for CPUs without SSE4.1's rounding instructions,
//! and fused multiply-add (relaxed SIMD's deterministic `madd`) for CPUs without FMA.

use ephem_module::LibCall;

/// WebAssembly wants an arithmetic (quiet) NaN out of a NaN in; libm returns a signalling NaN
/// unchanged.
fn quiet32(x: f32, r: f32) -> f32 {
    if x.is_nan() {
        f32::from_bits(x.to_bits() | 0x0040_0000)
    } else {
        r
    }
}

fn quiet64(x: f64, r: f64) -> f64 {
    if x.is_nan() {
        f64::from_bits(x.to_bits() | 0x0008_0000_0000_0000)
    } else {
        r
    }
}

extern "C" fn ceil_f32(x: f32) -> f32 {
    quiet32(x, x.ceil())
}
extern "C" fn ceil_f64(x: f64) -> f64 {
    quiet64(x, x.ceil())
}
extern "C" fn floor_f32(x: f32) -> f32 {
    quiet32(x, x.floor())
}
extern "C" fn floor_f64(x: f64) -> f64 {
    quiet64(x, x.floor())
}
extern "C" fn trunc_f32(x: f32) -> f32 {
    quiet32(x, x.trunc())
}
extern "C" fn trunc_f64(x: f64) -> f64 {
    quiet64(x, x.trunc())
}
extern "C" fn nearest_f32(x: f32) -> f32 {
    quiet32(x, x.round_ties_even())
}
extern "C" fn nearest_f64(x: f64) -> f64 {
    quiet64(x, x.round_ties_even())
}
extern "C" fn fma_f32(x: f32, y: f32, z: f32) -> f32 {
    x.mul_add(y, z)
}
extern "C" fn fma_f64(x: f64, y: f64, z: f64) -> f64 {
    x.mul_add(y, z)
}

/// The address the loader writes for `target`.
pub fn address(target: LibCall) -> usize {
    let f: *const () = match target {
        LibCall::CeilF32 => ceil_f32 as *const (),
        LibCall::CeilF64 => ceil_f64 as *const (),
        LibCall::FloorF32 => floor_f32 as *const (),
        LibCall::FloorF64 => floor_f64 as *const (),
        LibCall::TruncF32 => trunc_f32 as *const (),
        LibCall::TruncF64 => trunc_f64 as *const (),
        LibCall::NearestF32 => nearest_f32 as *const (),
        LibCall::NearestF64 => nearest_f64 as *const (),
        LibCall::FmaF32 => fma_f32 as *const (),
        LibCall::FmaF64 => fma_f64 as *const (),
    };
    f as usize
}
