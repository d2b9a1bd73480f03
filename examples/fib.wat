;; A small module for trying ephem: `ephem run examples/fib.wat --invoke fib 30`.
(module
  (memory (export "memory") 1)
  (data (i32.const 0) "ephem")
  ;; Iterative Fibonacci over i64.
  (func (export "fib") (param $n i32) (result i64)
    (local $a i64) (local $b i64) (local $t i64)
    (local.set $b (i64.const 1))
    (block $done
      (loop $next
        (br_if $done (i32.eqz (local.get $n)))
        (local.set $t (i64.add (local.get $a) (local.get $b)))
        (local.set $a (local.get $b))
        (local.set $b (local.get $t))
        (local.set $n (i32.sub (local.get $n) (i32.const 1)))
        (br $next)))
    (local.get $a))
  ;; Sum of the bytes of the data segment: 101+112+104+101+109.
  (func (export "checksum") (result i32)
    (local $i i32) (local $sum i32)
    (block $done
      (loop $next
        (br_if $done (i32.eq (local.get $i) (i32.const 5)))
        (local.set $sum (i32.add (local.get $sum) (i32.load8_u (local.get $i))))
        (local.set $i (i32.add (local.get $i) (i32.const 1)))
        (br $next)))
    (local.get $sum)))
