(module
  (import "bench" "start" (func $start))
  (import "bench" "end" (func $end))
  (tag $e (param i32))
  (memory (export "memory") 1)
  ;; Throws its argument mixed, every time.
  (func $throws (param i32) (result i32)
    (throw $e (i32.add (i32.mul (local.get 0) (i32.const 31)) (i32.const 7))))
  (func (export "_start") (local $i i32) (local $acc i32)
    (call $start)
    (loop $l
      (block $caught (result i32)
        (try_table (result i32) (catch $e $caught) (call $throws (local.get $i))))
      (local.set $acc (i32.xor (i32.rotl (local.get $acc) (i32.const 5))))
      (br_if $l (i32.ne (local.tee $i (i32.add (local.get $i) (i32.const 1))) (i32.const 2000000))))
    (call $end)
    (i32.store (i32.const 0) (local.get $acc))))
