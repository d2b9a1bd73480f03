//! Whether this machine can run code compiled for an [`ephem_module::Target`].
//!
//! The compiler records the CPU features it let Cranelift use, by Cranelift's setting names. A
//! feature this machine lacks, or a name this ephem does not know (a newer Cranelift's), makes
//! the artifact unusable here: running it could hit an illegal instruction.

use crate::Error;

/// Cranelift's x86_64 feature settings and how to detect each on this CPU.
type Detect = fn() -> bool;

#[cfg(target_arch = "x86_64")]
const FEATURES: &[(&str, Detect)] = &[
    ("has_sse3", || std::arch::is_x86_feature_detected!("sse3")),
    ("has_ssse3", || std::arch::is_x86_feature_detected!("ssse3")),
    ("has_cmpxchg16b", || {
        std::arch::is_x86_feature_detected!("cmpxchg16b")
    }),
    ("has_sse41", || {
        std::arch::is_x86_feature_detected!("sse4.1")
    }),
    ("has_sse42", || {
        std::arch::is_x86_feature_detected!("sse4.2")
    }),
    ("has_avx", || std::arch::is_x86_feature_detected!("avx")),
    ("has_avx2", || std::arch::is_x86_feature_detected!("avx2")),
    ("has_fma", || std::arch::is_x86_feature_detected!("fma")),
    ("has_avx_vnni", || {
        std::arch::is_x86_feature_detected!("avxvnni")
    }),
    ("has_avx512bitalg", || {
        std::arch::is_x86_feature_detected!("avx512bitalg")
    }),
    ("has_avx512dq", || {
        std::arch::is_x86_feature_detected!("avx512dq")
    }),
    ("has_avx512vl", || {
        std::arch::is_x86_feature_detected!("avx512vl")
    }),
    ("has_avx512vbmi", || {
        std::arch::is_x86_feature_detected!("avx512vbmi")
    }),
    ("has_avx512f", || {
        std::arch::is_x86_feature_detected!("avx512f")
    }),
    ("has_avx512vnni", || {
        std::arch::is_x86_feature_detected!("avx512vnni")
    }),
    ("has_popcnt", || {
        std::arch::is_x86_feature_detected!("popcnt")
    }),
    ("has_bmi1", || std::arch::is_x86_feature_detected!("bmi1")),
    ("has_bmi2", || std::arch::is_x86_feature_detected!("bmi2")),
    ("has_lzcnt", || std::arch::is_x86_feature_detected!("lzcnt")),
];
#[cfg(not(target_arch = "x86_64"))]
const FEATURES: &[(&str, Detect)] = &[];

/// The feature names this ephem knows.
pub fn known_features() -> impl Iterator<Item = &'static str> {
    FEATURES.iter().map(|f| f.0)
}

/// Whether this CPU has the feature Cranelift calls `name`; `None` for an unknown name.
pub fn host_has(name: &str) -> Option<bool> {
    FEATURES.iter().find(|f| f.0 == name).map(|f| (f.1)())
}

/// Checks code for `arch` using `features` against a machine whose features `has` reports
/// (see [`host_has`]).
pub fn check<'a>(
    arch: &str,
    features: impl IntoIterator<Item = &'a str>,
    has: impl Fn(&str) -> Option<bool>,
) -> Result<(), Error> {
    if arch != std::env::consts::ARCH {
        return Err(Error::Arch {
            found: arch.to_owned(),
        });
    }
    for feature in features {
        match has(feature) {
            Some(true) => {}
            Some(false) => return Err(Error::CpuFeature(feature.to_owned())),
            None => return Err(Error::UnknownCpuFeature(feature.to_owned())),
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    const ARCH: &str = std::env::consts::ARCH;

    #[test]
    fn a_missing_feature_is_refused() {
        let lacks_avx2 = |f: &str| Some(f != "has_avx2");
        assert!(check(ARCH, ["has_sse3"], lacks_avx2).is_ok());
        assert!(matches!(
            check(ARCH, ["has_sse3", "has_avx2"], lacks_avx2),
            Err(Error::CpuFeature(f)) if f == "has_avx2"
        ));
    }

    #[test]
    fn unknown_features_and_other_architectures_are_refused() {
        assert!(matches!(
            check(ARCH, ["has_quantum"], host_has),
            Err(Error::UnknownCpuFeature(_))
        ));
        assert!(matches!(
            check("riscv64", [], host_has),
            Err(Error::Arch { .. })
        ));
    }

    #[test]
    fn every_known_feature_can_be_detected() {
        assert!(known_features().count() >= 19);
        for f in known_features() {
            assert!(host_has(f).is_some(), "{f}");
        }
    }

    #[test]
    fn the_host_has_what_the_host_compiler_uses() {
        let compiler = ephem_compiler::Compiler::new().unwrap();
        let t = compiler.target();
        assert!(
            !t.cpu_features.is_empty(),
            "x86_64 always has sse2+ features"
        );
        check(&t.arch, t.cpu_features.iter().map(|f| f.as_str()), host_has).unwrap();
    }
}
