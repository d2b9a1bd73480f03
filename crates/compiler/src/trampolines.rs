//! Per-type glue in the text: the entry trampoline (host → wasm) and the host adapter
//! (wasm → host). See the calling convention in `ephem_module`.

use cranelift_codegen::ir::types::I64;
use cranelift_codegen::ir::{
    self, AbiParam, InstBuilder, MemFlagsData, Signature, StackSlotData, StackSlotKind,
};
use cranelift_frontend::{FunctionBuilder, FunctionBuilderContext};
use ephem_module::FuncType;

use crate::translate::{Env, ir_type, wasm_signature};

const VAL: i32 = 16;

/// `fn(vmctx, callee, values)`: calls `callee` with the arguments in `values`, writes its
/// results back there.
pub fn entry(
    env: &Env<'_>,
    ty: &FuncType,
    func: &mut ir::Function,
    ctx: &mut FunctionBuilderContext,
) {
    let mut sig = Signature::new(env.call_conv);
    sig.params.extend([AbiParam::new(I64); 3]);
    func.signature = sig;
    let mut b = FunctionBuilder::new(func, ctx);
    let block = b.create_block();
    b.append_block_params_for_function_params(block);
    b.switch_to_block(block);
    let [vmctx, callee, values] = b.block_params(block).try_into().unwrap();
    let no_caller = b.ins().iconst(I64, 0);
    let mut args = vec![vmctx, no_caller];
    for (i, &t) in ty.params.iter().enumerate() {
        args.push(
            b.ins()
                .load(ir_type(t), MemFlagsData::trusted(), values, i as i32 * VAL),
        );
    }
    let callee_sig = b.import_signature(wasm_signature(ty));
    let call = b.ins().call_indirect(callee_sig, callee, &args);
    let results = b.inst_results(call).to_vec();
    for (i, r) in results.into_iter().enumerate() {
        b.ins()
            .store(MemFlagsData::trusted(), r, values, i as i32 * VAL);
    }
    b.ins().return_(&[]);
    b.seal_all_blocks();
    b.finalize(env.frontend);
}

/// A function with the wasm signature of `ty` whose `vmctx` is a host function context: it
/// spills the arguments, calls the context's `call` with the caller's vmctx (which returns only
/// if the host function succeeded), and returns the results it wrote.
pub fn host_adapter(
    env: &Env<'_>,
    ty: &FuncType,
    func: &mut ir::Function,
    ctx: &mut FunctionBuilderContext,
) {
    func.signature = wasm_signature(ty);
    let mut b = FunctionBuilder::new(func, ctx);
    let block = b.create_block();
    b.append_block_params_for_function_params(block);
    b.switch_to_block(block);
    let params = b.block_params(block).to_vec();
    let (host_ctx, caller_vmctx) = (params[0], params[1]);
    let slots = ty.params.len().max(ty.results.len()).max(1) as u32;
    let slot = b.create_sized_stack_slot(StackSlotData::new(
        StackSlotKind::ExplicitSlot,
        slots * VAL as u32,
        4,
    ));
    let values = b.ins().stack_addr(I64, slot, 0);
    for (i, &p) in params[2..].iter().enumerate() {
        b.ins()
            .store(MemFlagsData::trusted(), p, values, i as i32 * VAL);
    }
    let mut call_sig = Signature::new(env.call_conv);
    call_sig.params.extend([AbiParam::new(I64); 3]);
    let call_sig = b.import_signature(call_sig);
    let call_fn = b.ins().load(I64, MemFlagsData::trusted(), host_ctx, 0);
    b.ins()
        .call_indirect(call_sig, call_fn, &[host_ctx, caller_vmctx, values]);
    let results: Vec<_> = ty
        .results
        .iter()
        .enumerate()
        .map(|(i, &t)| {
            b.ins()
                .load(ir_type(t), MemFlagsData::trusted(), values, i as i32 * VAL)
        })
        .collect();
    b.ins().return_(&results);
    b.seal_all_blocks();
    b.finalize(env.frontend);
}
