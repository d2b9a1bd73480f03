//! Fuel metering, in code compiled with fuel (`Compiler::with_fuel`).
//!
//! Each operator's cost is added up at compile time over a straight-line stretch and
//! subtracted from a variable where control flow leaves the stretch ([`Translator::op`]), so
//! the charge depends only on the path taken and is the same on every run. Between functions
//! the fuel travels in the pinned register (see `ephem_module`'s calling convention): set
//! before calls, returns and traps, read at entry and after calls. Builtins that charge per
//! byte or element take it from the store, where it is written before them and read after. At
//! every function entry and loop header, fuel below zero traps `OutOfFuel`.

use cranelift_codegen::ir::InstBuilder;
use cranelift_codegen::ir::condcodes::IntCC;
use cranelift_codegen::ir::types::I64;
use ephem_module::VmOffsets;
use wasmparser::Operator;

use super::{Translator, trusted};
use crate::traps::code;

impl Translator<'_, '_> {
    /// Makes the fuel variable, takes the fuel the caller passed and checks it (at entry).
    pub(super) fn start_fuel(&mut self) {
        let var = self.b.declare_var(I64);
        self.fuel = Some(var);
        self.reload_fuel();
        self.fuel_check();
    }

    /// Takes the fuel from the pinned register into the fuel variable, if the code is metered
    /// (at entry and after calls, which may charge fuel or refuel).
    pub(super) fn reload_fuel(&mut self) {
        let Some(var) = self.fuel else { return };
        let value = self.b.ins().get_pinned_reg(I64);
        self.b.def_var(var, value);
    }

    /// Subtracts the fuel of the operators since the last subtraction.
    pub(super) fn flush_fuel(&mut self) {
        let Some(var) = self.fuel else { return };
        if self.fuel_pending > 0 {
            let left = self.b.use_var(var);
            let left = self.b.ins().iadd_imm_s(left, -(self.fuel_pending as i64));
            self.b.def_var(var, left);
            self.fuel_pending = 0;
        }
    }

    /// Puts the remaining fuel in the pinned register (before calls, returns and traps).
    pub(super) fn spill_fuel(&mut self) {
        self.flush_fuel();
        let Some(var) = self.fuel else { return };
        let left = self.b.use_var(var);
        self.b.ins().set_pinned_reg(left);
    }

    /// Writes the remaining fuel to the store, where builtins charge it, and back.
    pub(super) fn fuel_to_store(&mut self) {
        self.spill_fuel();
        let Some(var) = self.fuel else { return };
        let left = self.b.use_var(var);
        let at = self.load_ptr(self.vmctx, VmOffsets::FUEL);
        self.b.ins().store(trusted(), left, at, 0);
    }

    /// Reads the store's fuel after a builtin charged it.
    pub(super) fn fuel_from_store(&mut self) {
        let Some(var) = self.fuel else { return };
        let at = self.load_ptr(self.vmctx, VmOffsets::FUEL);
        let left = self.b.ins().load(I64, trusted(), at, 0);
        self.b.def_var(var, left);
        self.b.ins().set_pinned_reg(left);
    }

    /// Puts the fuel in the pinned register, where a trap takes it from (so that what ran
    /// before a trap is paid for), and traps with `OutOfFuel` once it is below zero.
    pub(super) fn fuel_check(&mut self) {
        let Some(var) = self.fuel else { return };
        let left = self.b.use_var(var);
        self.b.ins().set_pinned_reg(left);
        let out = self.b.ins().icmp_imm_s(IntCC::SignedLessThan, left, 0);
        self.b.ins().trapnz(out, code::OUT_OF_FUEL);
    }

    /// Whether `op` leaves the straight-line stretch (or calls out), so that the fuel of what
    /// came before must be subtracted first.
    pub(super) fn ends_stretch(op: &Operator<'_>) -> bool {
        use Operator as O;
        matches!(
            op,
            O::Block { .. }
                | O::TryTable { .. }
                | O::Try { .. }
                | O::Catch { .. }
                | O::CatchAll
                | O::Delegate { .. }
                | O::Loop { .. }
                | O::If { .. }
                | O::Else
                | O::End
                | O::Br { .. }
                | O::BrIf { .. }
                | O::BrOnNull { .. }
                | O::BrOnNonNull { .. }
                | O::BrTable { .. }
                | O::Return
        )
    }
}
