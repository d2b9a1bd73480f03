(module
  (import "env" "memory" (memory 1 1 shared))
  (func (export "run") (param $thread i32) (param $n i32) (result i32)
    (local $at i32)
    (local.set $at (i32.shl (i32.add (local.get $thread) (i32.const 1)) (i32.const 6)))
    (loop $l
      (drop (i32.atomic.rmw.add (local.get $at) (i32.const 1)))
      (br_if $l (local.tee $n (i32.sub (local.get $n) (i32.const 1)))))
    (i32.atomic.load (local.get $at))))
