(module
  (import "env" "memory" (memory 1 1 shared))
  (func (export "run") (param $thread i32) (param $n i32) (result i32)
    (loop $l
      (drop (i32.atomic.rmw.add (i32.const 0) (i32.const 1)))
      (br_if $l (local.tee $n (i32.sub (local.get $n) (i32.const 1)))))
    (i32.atomic.load (i32.const 0))))
