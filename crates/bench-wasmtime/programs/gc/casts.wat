;; Casts through a class hierarchy, as object-oriented languages' compilers emit them: shapes
;; (a base struct type open to subtypes, three subtypes, one of them with a subtype of its own)
;; kept in an array of `anyref`; `run(n)` walks the array n times, casting each element to the
;; base type (a downcast from `anyref` to a non-final type) and testing it against each
;; subtype, and returns a checksum of the fields read.
(module
  (type $shape (sub (struct (field $id i32))))
  (type $circle (sub $shape (struct (field $id i32) (field $r i32))))
  (type $square (sub $shape (struct (field $id i32) (field $side i32))))
  (type $rect (sub $shape (struct (field $id i32) (field $w i32) (field $h i32))))
  (type $golden (sub final $rect (struct (field $id i32) (field $w i32) (field $h i32))))
  (type $all (array (mut anyref)))
  (func $make (param $k i32) (result anyref)
    (block $c
      (block $s
        (block $r
          (block $g
            (br_table $c $s $r $g (i32.rem_u (local.get $k) (i32.const 4))))
          (return (struct.new $golden (local.get $k) (i32.const 8) (i32.const 5))))
        (return (struct.new $rect (local.get $k) (i32.const 3) (i32.const 4))))
      (return (struct.new $square (local.get $k) (i32.const 6))))
    (struct.new $circle (local.get $k) (i32.const 7)))
  (func $run (export "run") (param $n i32) (result i32)
    (local $all (ref $all)) (local $i i32) (local $round i32) (local $sum i32)
    (local $x anyref) (local $s (ref $shape))
    (local.set $all (array.new_default $all (i32.const 1024)))
    (block $made
      (loop $make
        (br_if $made (i32.ge_u (local.get $i) (i32.const 1024)))
        (array.set $all (local.get $all) (local.get $i) (call $make (local.get $i)))
        (local.set $i (i32.add (local.get $i) (i32.const 1)))
        (br $make)))
    (block $done
      (loop $rounds
        (br_if $done (i32.ge_u (local.get $round) (local.get $n)))
        (local.set $i (i32.const 0))
        (block $walked
          (loop $walk
            (br_if $walked (i32.ge_u (local.get $i) (i32.const 1024)))
            (local.set $x (array.get $all (local.get $all) (local.get $i)))
            (local.set $s (ref.cast (ref $shape) (local.get $x)))
            (local.set $sum (i32.add (local.get $sum) (struct.get $shape $id (local.get $s))))
            (if (ref.test (ref $rect) (local.get $s))
              (then (local.set $sum (i32.add (local.get $sum)
                (struct.get $rect $w (ref.cast (ref $rect) (local.get $s)))))))
            (if (ref.test (ref $circle) (local.get $s))
              (then (local.set $sum (i32.add (local.get $sum)
                (struct.get $circle $r (ref.cast (ref $circle) (local.get $s)))))))
            (local.set $i (i32.add (local.get $i) (i32.const 1)))
            (br $walk)))
        (local.set $round (i32.add (local.get $round) (i32.const 1)))
        (br $rounds)))
    (local.get $sum))
  (func (export "main") (result i32) (call $run (i32.const 2))))
