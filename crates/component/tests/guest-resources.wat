;; A component that defines a resource type (`r`, rep i32, with a destructor that adds the rep
;; to a global) and exports functions that make, peek at, consume and forge handles of it.
(component
  (core module $impl
    (global $destroyed (mut i32) (i32.const 0))
    (func (export "dtor") (param i32)
      (global.set $destroyed (i32.add (global.get $destroyed) (local.get 0))))
    (func (export "destroyed") (result i32) (global.get $destroyed)))
  (core instance $impl (instantiate $impl))
  (alias core export $impl "dtor" (core func $dtor))
  (type $r (resource (rep i32) (dtor (core func $dtor))))
  (core func $new (canon resource.new $r))
  (core func $rep (canon resource.rep $r))
  (core func $drop (canon resource.drop $r))
  (core module $m
    (import "" "new" (func $new (param i32) (result i32)))
    (import "" "rep" (func $rep (param i32) (result i32)))
    (import "" "drop" (func $drop (param i32)))
    ;; An own handle for `rep`.
    (func (export "make") (param i32) (result i32) (call $new (local.get 0)))
    ;; A borrow lent to the instance that defines the type arrives as its rep.
    (func (export "peek") (param i32) (result i32) (local.get 0))
    ;; The rep behind an own handle, which is then dropped (the destructor runs).
    (func (export "consume") (param $h i32) (result i32) (local $r i32)
      (local.set $r (call $rep (local.get $h)))
      (call $drop (local.get $h))
      (local.get $r))
    ;; Two handles made and both dropped: their reps are destroyed.
    (func (export "churn") (param $a i32) (param $b i32)
      (call $drop (call $new (local.get $a)))
      (call $drop (call $new (local.get $b))))
    ;; A handle that was never made.
    (func (export "forged") (result i32) (call $rep (i32.const 99))))
  (core instance $m (instantiate $m (with "" (instance
    (export "new" (func $new)) (export "rep" (func $rep)) (export "drop" (func $drop))))))
  (export $R "r" (type $r))
  (func (export "make") (param "rep" u32) (result (own $R))
    (canon lift (core func $m "make")))
  (func (export "peek") (param "r" (borrow $R)) (result u32)
    (canon lift (core func $m "peek")))
  (func (export "consume") (param "r" (own $R)) (result u32)
    (canon lift (core func $m "consume")))
  (func (export "churn") (param "a" u32) (param "b" u32)
    (canon lift (core func $m "churn")))
  (func (export "forged") (result u32)
    (canon lift (core func $m "forged")))
  (func (export "destroyed") (result u32)
    (canon lift (core func $impl "destroyed"))))
