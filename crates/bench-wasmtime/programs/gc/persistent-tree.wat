;; A persistent (immutable) binary search tree: each insertion copies the path to the new
;; key, as functional languages' maps do. `run(n)` inserts n pseudo-random keys (a linear
;; congruential sequence), then looks each up again, and returns how many it found plus the
;; tree's height.
(module
  (type $tree (struct (field $key i32) (field $l (ref null $tree)) (field $r (ref null $tree))))
  (func $insert (param $t (ref null $tree)) (param $k i32) (result (ref $tree))
    (local $key i32)
    (if (ref.is_null (local.get $t))
      (then (return (struct.new $tree (local.get $k) (ref.null $tree) (ref.null $tree)))))
    (local.set $key (struct.get $tree $key (local.get $t)))
    (if (i32.lt_s (local.get $k) (local.get $key))
      (then
        (return (struct.new $tree (local.get $key)
          (call $insert (struct.get $tree $l (local.get $t)) (local.get $k))
          (struct.get $tree $r (local.get $t))))))
    (if (i32.gt_s (local.get $k) (local.get $key))
      (then
        (return (struct.new $tree (local.get $key)
          (struct.get $tree $l (local.get $t))
          (call $insert (struct.get $tree $r (local.get $t)) (local.get $k))))))
    (ref.as_non_null (local.get $t)))
  (func $has (param $t (ref null $tree)) (param $k i32) (result i32)
    (local $key i32)
    (loop $down
      (if (ref.is_null (local.get $t)) (then (return (i32.const 0))))
      (local.set $key (struct.get $tree $key (local.get $t)))
      (if (i32.eq (local.get $k) (local.get $key)) (then (return (i32.const 1))))
      (local.set $t
        (if (result (ref null $tree)) (i32.lt_s (local.get $k) (local.get $key))
          (then (struct.get $tree $l (local.get $t)))
          (else (struct.get $tree $r (local.get $t)))))
      (br $down))
    (unreachable))
  (func $height (param $t (ref null $tree)) (result i32)
    (local $a i32) (local $b i32)
    (if (ref.is_null (local.get $t)) (then (return (i32.const 0))))
    (local.set $a (call $height (struct.get $tree $l (local.get $t))))
    (local.set $b (call $height (struct.get $tree $r (local.get $t))))
    (i32.add (i32.const 1) (select (local.get $a) (local.get $b) (i32.gt_s (local.get $a) (local.get $b)))))
  (func $run (export "run") (param $n i32) (result i32)
    (local $t (ref null $tree)) (local $i i32) (local $x i32) (local $found i32)
    (local.set $x (i32.const 12345))
    (block $done
      (loop $add
        (br_if $done (i32.ge_s (local.get $i) (local.get $n)))
        (local.set $x (i32.add (i32.mul (local.get $x) (i32.const 1103515245)) (i32.const 12345)))
        (local.set $t (call $insert (local.get $t) (i32.shr_u (local.get $x) (i32.const 8))))
        (local.set $i (i32.add (local.get $i) (i32.const 1)))
        (br $add)))
    (local.set $x (i32.const 12345))
    (local.set $i (i32.const 0))
    (block $done
      (loop $look
        (br_if $done (i32.ge_s (local.get $i) (local.get $n)))
        (local.set $x (i32.add (i32.mul (local.get $x) (i32.const 1103515245)) (i32.const 12345)))
        (local.set $found
          (i32.add (local.get $found) (call $has (local.get $t) (i32.shr_u (local.get $x) (i32.const 8)))))
        (local.set $i (i32.add (local.get $i) (i32.const 1)))
        (br $look)))
    (i32.add (local.get $found) (call $height (local.get $t))))
  (func (export "main") (result i32) (call $run (i32.const 100))))
