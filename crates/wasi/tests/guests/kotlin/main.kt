// Exercises structs (classes), arrays, interfaces/virtual dispatch (ref.cast), strings, collections.
sealed interface Shape { fun area(): Double; val name: String }
data class Rect(val w: Int, val h: Int) : Shape { override fun area() = (w * h).toDouble(); override val name get() = "Rect" }
data class Circle(val r: Int) : Shape { override fun area() = 3.0 * r * r; override val name get() = "Circle" }

class Node(val value: Int, var next: Node?)

fun fib(n: Int): Long { var a = 0L; var b = 1L; repeat(n) { val t = a + b; a = b; b = t }; return a }

fun sieve(n: Int): List<Int> {
    val composite = BooleanArray(n + 1)
    val out = ArrayList<Int>()
    for (i in 2..n) { if (!composite[i]) { out.add(i); var j = i * i; while (j <= n) { composite[j] = true; j += i } } }
    return out
}

fun main() {
    println("Hello from Kotlin/Wasm WASI")
    val shapes: List<Shape> = listOf(Rect(3, 4), Circle(2), Rect(5, 6), Circle(1))
    for (s in shapes) println("${s.name} ${s} area=${s.area()}")
    println("total area = ${shapes.sumOf { it.area() }}")
    var head: Node? = null
    for (i in 1..10) head = Node(i * i, head)
    var sum = 0; var cur = head; val sb = StringBuilder()
    while (cur != null) { sum += cur.value; sb.append(cur.value).append(','); cur = cur.next }
    println("list: $sb sum=$sum")
    println("fib(50) = ${fib(50)}")
    val primes = sieve(100)
    println("primes<=100: ${primes.size} last=${primes.last()} ${primes.take(10)}")
    val counts = HashMap<Char, Int>()
    for (c in "the quick brown fox jumps over the lazy dog") if (c != ' ') counts[c] = (counts[c] ?: 0) + 1
    println("letters: " + counts.entries.sortedBy { it.key }.joinToString("") { "${it.key}${it.value}" })
    val arr = IntArray(20) { (it * 7919) % 101 }
    arr.sort()
    println("sorted: ${arr.joinToString(" ")}")
    val words = listOf("wasm", "gc", "kotlin", "struct", "array", "ref")
    println(words.map { it.uppercase() }.sortedBy { it.length }.joinToString("-"))
    try { val x: Any = "str"; println((x as Int) + 1) } catch (e: ClassCastException) { println("caught ClassCastException") }
    try { throw IllegalStateException("boom") } catch (e: IllegalStateException) { println("caught ${e.message}") }
}
