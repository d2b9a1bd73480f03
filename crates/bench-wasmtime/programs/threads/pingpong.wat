(module
  (import "env" "memory" (memory 1 1 shared))
  ;; The turn count at 0: thread k moves when it is even for k = 0, odd for k = 1, until both
  ;; have moved n / 64 times (a hand-off costs a wake-up); the other waits for the count to
  ;; change.
  (func (export "run") (param $thread i32) (param $n i32) (result i32)
    (local $v i32) (local $moves i32)
    (local.set $n (i32.shr_u (local.get $n) (i32.const 6)))
    (block $done
      (loop $l
        (local.set $v (i32.atomic.load (i32.const 0)))
        (br_if $done (i32.ge_u (local.get $v) (i32.shl (local.get $n) (i32.const 1))))
        (if (i32.eq (i32.and (local.get $v) (i32.const 1)) (local.get $thread))
          (then
            (i32.atomic.store (i32.const 0) (i32.add (local.get $v) (i32.const 1)))
            (drop (memory.atomic.notify (i32.const 0) (i32.const 1)))
            (local.set $moves (i32.add (local.get $moves) (i32.const 1))))
          (else
            (drop (memory.atomic.wait32 (i32.const 0) (local.get $v) (i64.const -1)))))
        (br $l)))
    (local.get $moves)))
