(module
  (import "env" "memory" (memory 1 1 shared))
  ;; The lock at 0 (0 free, 1 held); the counter it guards at 64.
  (func (export "run") (param $thread i32) (param $n i32) (result i32)
    (loop $l
      (loop $take
        (br_if $take (i32.atomic.rmw.cmpxchg (i32.const 0) (i32.const 0) (i32.const 1))))
      (i32.store (i32.const 64) (i32.add (i32.load (i32.const 64)) (i32.const 1)))
      (i32.atomic.store (i32.const 0) (i32.const 0))
      (br_if $l (local.tee $n (i32.sub (local.get $n) (i32.const 1)))))
    (i32.atomic.load (i32.const 64))))
