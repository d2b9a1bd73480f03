//! What bounds a benchmark's guests: nothing, a deadline, fuel, or both, each with a deadline
//! and fuel that never run out, so that what is measured is what bounding costs. One
//! choice for `ephem bench fresh` and the wasmtime comparisons (which give wasmtime the same
//! settings through [`Metering::deadline`] and [`Metering::fuel`]).

use ephem::{Compiler, Store};

/// What bounds the guests: nothing, a deadline (a far one: ephem compiles nothing in for it),
/// fuel (metering compiled in, more fuel than any run uses), or both, as a server that bounds
/// every call runs them.
#[derive(clap::ValueEnum, Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Metering {
    #[default]
    Off,
    Deadline,
    Fuel,
    Both,
}

impl Metering {
    pub fn name(self) -> &'static str {
        match self {
            Metering::Off => "off",
            Metering::Deadline => "deadline",
            Metering::Fuel => "fuel",
            Metering::Both => "both",
        }
    }

    pub fn deadline(self) -> bool {
        matches!(self, Metering::Deadline | Metering::Both)
    }

    pub fn fuel(self) -> bool {
        matches!(self, Metering::Fuel | Metering::Both)
    }

    /// The compiler for this metering.
    pub fn compiler(self) -> anyhow::Result<Compiler> {
        let mut compiler = Compiler::new()?;
        if self.fuel() {
            compiler = compiler.with_fuel();
        }
        Ok(compiler)
    }

    /// Gives `store` what this metering needs: far more fuel and time than a call takes.
    pub fn arm<T>(self, store: &mut Store<T>) {
        if self.fuel() {
            store.set_fuel(u64::MAX / 2).unwrap();
        }
        if self.deadline() {
            store.set_epoch_deadline(u64::MAX / 2);
        }
    }
}
