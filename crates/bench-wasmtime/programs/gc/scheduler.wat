;; A linked-list scheduler: tasks wait in a queue of list cells; each step takes the first
;; task, runs it (it counts the step and gets a new message, an array of four i32s, in place
;; of its last), and queues it again in a new cell. `run(n)` takes n steps over 64 tasks and
;; returns the sum over the tasks of count * id plus their last messages' first elements.
(module
  (type $msg (array (mut i32)))
  (type $task (struct (field $id i32) (field $count (mut i32)) (field $msg (mut (ref null $msg)))))
  (type $cell (struct (field $task (ref $task)) (field $next (mut (ref null $cell)))))
  (type $queue (struct (field $head (mut (ref null $cell))) (field $tail (mut (ref null $cell)))))
  (func $push (param $q (ref $queue)) (param $t (ref $task))
    (local $c (ref $cell))
    (local.set $c (struct.new $cell (local.get $t) (ref.null $cell)))
    (if (ref.is_null (struct.get $queue $tail (local.get $q)))
      (then (struct.set $queue $head (local.get $q) (local.get $c)))
      (else (struct.set $cell $next (ref.as_non_null (struct.get $queue $tail (local.get $q))) (local.get $c))))
    (struct.set $queue $tail (local.get $q) (local.get $c)))
  (func $pop (param $q (ref $queue)) (result (ref $task))
    (local $c (ref $cell))
    (local.set $c (ref.as_non_null (struct.get $queue $head (local.get $q))))
    (struct.set $queue $head (local.get $q) (struct.get $cell $next (local.get $c)))
    (if (ref.is_null (struct.get $queue $head (local.get $q)))
      (then (struct.set $queue $tail (local.get $q) (ref.null $cell))))
    (struct.get $cell $task (local.get $c)))
  (func $run (export "run") (param $n i32) (result i32)
    (local $q (ref $queue)) (local $t (ref $task)) (local $i i32) (local $sum i32)
    (local.set $q (struct.new $queue (ref.null $cell) (ref.null $cell)))
    (block $made
      (loop $make
        (br_if $made (i32.ge_s (local.get $i) (i32.const 64)))
        (call $push (local.get $q) (struct.new $task (local.get $i) (i32.const 0) (ref.null $msg)))
        (local.set $i (i32.add (local.get $i) (i32.const 1)))
        (br $make)))
    (local.set $i (i32.const 0))
    (block $done
      (loop $step
        (br_if $done (i32.ge_s (local.get $i) (local.get $n)))
        (local.set $t (call $pop (local.get $q)))
        (struct.set $task $count (local.get $t)
          (i32.add (struct.get $task $count (local.get $t)) (i32.const 1)))
        (struct.set $task $msg (local.get $t)
          (array.new_fixed $msg 4 (local.get $i) (struct.get $task $id (local.get $t))
            (i32.const 0) (i32.const 1)))
        (call $push (local.get $q) (local.get $t))
        (local.set $i (i32.add (local.get $i) (i32.const 1)))
        (br $step)))
    (block $summed
      (loop $sum
        (br_if $summed (ref.is_null (struct.get $queue $head (local.get $q))))
        (local.set $t (call $pop (local.get $q)))
        (local.set $sum (i32.add (local.get $sum)
          (i32.mul (struct.get $task $count (local.get $t)) (struct.get $task $id (local.get $t)))))
        (if (i32.eqz (ref.is_null (struct.get $task $msg (local.get $t))))
          (then (local.set $sum (i32.add (local.get $sum)
            (array.get $msg (ref.as_non_null (struct.get $task $msg (local.get $t))) (i32.const 0))))))
        (br $sum)))
    (local.get $sum))
  (func (export "main") (result i32) (call $run (i32.const 200))))
