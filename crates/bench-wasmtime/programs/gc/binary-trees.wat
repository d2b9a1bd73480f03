;; The binary-trees benchmark (the Computer Language Benchmarks Game's): a stretch tree of
;; depth n + 1, a long-lived tree of depth n, then for depths 4, 6, ... n, 2^(n - d + 4) trees
;; of depth d, each built and walked. `run(n)` returns the sum of every walk's node count.
(module
  (type $node (struct (field $l (ref null $node)) (field $r (ref null $node))))
  (func $make (param $d i32) (result (ref $node))
    (if (result (ref $node)) (i32.eqz (local.get $d))
      (then (struct.new $node (ref.null $node) (ref.null $node)))
      (else
        (struct.new $node
          (call $make (i32.sub (local.get $d) (i32.const 1)))
          (call $make (i32.sub (local.get $d) (i32.const 1)))))))
  (func $check (param $t (ref $node)) (result i32)
    (local $l (ref null $node))
    (local.set $l (struct.get $node $l (local.get $t)))
    (if (result i32) (ref.is_null (local.get $l))
      (then (i32.const 1))
      (else
        (i32.add (i32.const 1)
          (i32.add (call $check (ref.as_non_null (local.get $l)))
            (call $check (ref.as_non_null (struct.get $node $r (local.get $t)))))))))
  (func $run (export "run") (param $n i32) (result i32)
    (local $long (ref null $node)) (local $d i32) (local $i i32) (local $iters i32) (local $sum i32)
    (local.set $sum (call $check (call $make (i32.add (local.get $n) (i32.const 1)))))
    (local.set $long (call $make (local.get $n)))
    (local.set $d (i32.const 4))
    (block $done
      (loop $depths
        (br_if $done (i32.gt_s (local.get $d) (local.get $n)))
        (local.set $iters
          (i32.shl (i32.const 1) (i32.add (i32.sub (local.get $n) (local.get $d)) (i32.const 4))))
        (local.set $i (i32.const 0))
        (block $trees
          (loop $tree
            (br_if $trees (i32.ge_s (local.get $i) (local.get $iters)))
            (local.set $sum (i32.add (local.get $sum) (call $check (call $make (local.get $d)))))
            (local.set $i (i32.add (local.get $i) (i32.const 1)))
            (br $tree)))
        (local.set $d (i32.add (local.get $d) (i32.const 2)))
        (br $depths)))
    (i32.add (local.get $sum) (call $check (ref.as_non_null (local.get $long)))))
  (func (export "main") (result i32) (call $run (i32.const 4))))
