(module
  (import "bench" "start" (func $start))
  (import "bench" "end" (func $end))
  ;; A sieve of Eratosthenes over 16 MiB, a byte per number, run four times; addresses are
  ;; i32 (the same kernel as sieve64.wat but for the address type).
  (memory (export "memory") 256)
  (func (export "_start") (local $round i32) (local $i i32) (local $j i32) (local $count i32)
    (call $start)
    (loop $rounds
      (memory.fill (i32.const 0) (i32.const 0) (i32.const 16777216))
      (local.set $count (i32.const 0))
      (local.set $i (i32.const 2))
      (loop $outer
        (if (i32.eqz (i32.load8_u (local.get $i)))
          (then
            (local.set $count (i32.add (local.get $count) (i32.const 1)))
            (local.set $j (i32.mul (local.get $i) (local.get $i)))
            (if (i32.le_u (local.get $i) (i32.const 4096))
              (then
                (block $done
                  (loop $inner
                    (br_if $done (i32.ge_u (local.get $j) (i32.const 16777216)))
                    (i32.store8 (local.get $j) (i32.const 1))
                    (local.set $j (i32.add (local.get $j) (local.get $i)))
                    (br $inner)))))))
        (local.set $i (i32.add (local.get $i) (i32.const 1)))
        (br_if $outer (i32.lt_u (local.get $i) (i32.const 16777216))))
      (local.set $round (i32.add (local.get $round) (i32.const 1)))
      (br_if $rounds (i32.lt_u (local.get $round) (i32.const 4))))
    (call $end)
    (i32.store (i32.const 0) (local.get $count))))
