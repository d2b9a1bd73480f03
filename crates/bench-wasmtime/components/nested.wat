;; Two components inside one: `$outer`'s core code calls `add`, which `$inner` lifts, through a
;; lowering (an adapter between the two). Four core instances per instantiation.
(component
  (component $inner
    (core module $m
      (memory (export "memory") 1)
      (func (export "add") (param i32 i32) (result i32) (i32.add (local.get 0) (local.get 1))))
    (core instance $i (instantiate $m))
    (func (export "add") (param "a" u32) (param "b" u32) (result u32)
      (canon lift (core func $i "add"))))
  (instance $a (instantiate $inner))
  (component $outer
    (import "add" (func $add (param "a" u32) (param "b" u32) (result u32)))
    (core func $add (canon lower (func $add)))
    (core module $libc (memory (export "memory") 1))
    (core instance $libc (instantiate $libc))
    (core module $m
      (import "x" "add" (func $add (param i32 i32) (result i32)))
      (import "libc" "memory" (memory 1))
      (func (export "sum3") (param i32 i32 i32) (result i32)
        (call $add (call $add (local.get 0) (local.get 1)) (local.get 2))))
    (core instance $i (instantiate $m
      (with "x" (instance (export "add" (func $add))))
      (with "libc" (instance $libc))))
    (func (export "sum3") (param "a" u32) (param "b" u32) (param "c" u32) (result u32)
      (canon lift (core func $i "sum3"))))
  (instance $b (instantiate $outer (with "add" (func $a "add"))))
  (export "sum3" (func $b "sum3")))
