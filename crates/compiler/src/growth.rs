//! Which functions may grow a memory before they return.
//!
//! Code that checks bounds keeps each memory's length in a register and must read it again
//! after anything that can grow a memory. A call of a function of this module that grows no
//! memory, and calls nothing that does, cannot: after it the register still holds the length.
//! Anything else may: `memory.grow`, an imported function (the host can grow an exported or
//! imported memory), and `call_indirect` and `call_ref` (the callee is not known, and may be
//! another module's). A direct call is followed to its callee; a tail call too, since the
//! callee returns to this function's caller. The scan reads every body once more, so it runs
//! only for code that checks bounds.

use ephem_module::ModuleInfo;
use wasmparser::{FunctionBody, Operator};

use crate::CompileError;

/// Per function of the module (imports first), whether calling it may grow a memory; and per
/// memory, whether the module's code grows it.
pub struct Growth {
    may_grow: Vec<bool>,
    grown: Vec<bool>,
}

impl Growth {
    /// Every call may grow a memory (what code that keeps no lengths assumes, unread).
    pub fn any() -> Growth {
        Growth {
            may_grow: Vec::new(),
            grown: Vec::new(),
        }
    }

    /// Scans the module's `bodies` (its defined functions, in order).
    pub fn of(info: &ModuleInfo, bodies: &[FunctionBody<'_>]) -> Result<Growth, CompileError> {
        let imported = info.imported_funcs as usize;
        let mut may_grow = vec![true; imported];
        may_grow.resize(imported + bodies.len(), false);
        // Who calls each function directly: growth spreads from callee to callers.
        let mut callers: Vec<Vec<u32>> = vec![Vec::new(); may_grow.len()];
        let mut grown = vec![false; info.memories.len()];
        for (i, body) in bodies.iter().enumerate() {
            let func = (imported + i) as u32;
            let mut ops = body.get_operators_reader()?;
            while !ops.eof() {
                match ops.read()? {
                    Operator::MemoryGrow { mem } => {
                        may_grow[func as usize] = true;
                        if let Some(g) = grown.get_mut(mem as usize) {
                            *g = true;
                        }
                    }
                    Operator::CallIndirect { .. }
                    | Operator::ReturnCallIndirect { .. }
                    | Operator::CallRef { .. }
                    | Operator::ReturnCallRef { .. } => may_grow[func as usize] = true,
                    Operator::Call { function_index } | Operator::ReturnCall { function_index } => {
                        if let Some(c) = callers.get_mut(function_index as usize) {
                            c.push(func);
                        }
                    }
                    _ => {}
                }
            }
        }
        let mut work: Vec<u32> = (0..may_grow.len() as u32)
            .filter(|&f| may_grow[f as usize])
            .collect();
        while let Some(f) = work.pop() {
            for &caller in &callers[f as usize] {
                if !may_grow[caller as usize] {
                    may_grow[caller as usize] = true;
                    work.push(caller);
                }
            }
        }
        Ok(Growth { may_grow, grown })
    }

    /// Whether the module's code grows `memory` (`memory.grow`); only the host, or another
    /// module it is exported to, can grow one it does not.
    pub fn grows(&self, memory: u32) -> bool {
        self.grown.get(memory as usize).copied().unwrap_or(true)
    }

    /// Whether a call of `func` may grow a memory.
    pub fn may_grow(&self, func: u32) -> bool {
        self.may_grow.get(func as usize).copied().unwrap_or(true)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn growth(wat: &str) -> Vec<bool> {
        let wasm = wat::parse_str(wat).unwrap();
        let parsed = crate::parse::parse(&wasm, crate::Proposals::ALL).unwrap();
        let g = Growth::of(&parsed.info, &parsed.bodies).unwrap();
        (0..parsed.info.funcs.len() as u32)
            .map(|f| g.may_grow(f))
            .collect()
    }

    #[test]
    fn growth_spreads_from_callees_to_callers_and_unknown_callees_may_grow() {
        let wat = r#"(module
          (type $t (func))
          (import "host" "f" (func $host))
          (memory 1)
          (table 1 funcref)
          (func $leaf)
          (func $grows (drop (memory.grow (i32.const 1))))
          (func $calls_leaf (call $leaf))
          (func $calls_grows (call $calls_leaf) (call $grows))
          (func $tail_grows (return_call $calls_grows))
          (func $calls_host (call $host))
          (func $indirect (call_indirect (type $t) (i32.const 0)))
          (func $by_ref (call_ref $t (ref.func $leaf)))
          (elem declare func $leaf)
          (func $loop (call $loop2))
          (func $loop2 (call $loop)))"#;
        assert_eq!(
            growth(wat),
            [
                true, false, true, false, true, true, true, true, true, false, false
            ]
        );
    }

    /// Which memories the module's code grows: those a `memory.grow` names, wherever it is.
    #[test]
    fn grown_memories_are_those_memory_grow_names() {
        let wat = r#"(module
          (import "env" "m" (memory 1))
          (memory $a 1)
          (memory $b 1)
          (memory $c 1)
          (func (drop (memory.grow $b (i32.const 1))))
          (func (drop (memory.size $c)) (i32.store $c (i32.const 0) (i32.const 1))))"#;
        let wasm = wat::parse_str(wat).unwrap();
        let parsed = crate::parse::parse(&wasm, crate::Proposals::ALL).unwrap();
        let g = Growth::of(&parsed.info, &parsed.bodies).unwrap();
        let grown: Vec<bool> = (0..4).map(|m| g.grows(m)).collect();
        assert_eq!(grown, [false, false, true, false]);
    }
}
