@file:OptIn(kotlin.wasm.ExperimentalWasmInterop::class)
import kotlin.wasm.WasmExport

class Tree(val left: Tree?, val right: Tree?)
fun make(d: Int): Tree = if (d == 0) Tree(null, null) else Tree(make(d - 1), make(d - 1))
fun Tree.check(): Int = 1 + (left?.check() ?: 0) + (right?.check() ?: 0)

open class Animal(val legs: Int) { open fun weight(): Int = legs }
class Bird(val wings: Int) : Animal(2) { override fun weight() = legs + wings * 3 }
class Dog : Animal(4) { override fun weight() = legs * 10 }

@WasmExport fun binaryTrees(depth: Int): Int {
    var total = 0
    for (i in 0 until 4) total += make(depth).check()
    return total
}

@WasmExport fun fib(n: Int): Long { var a = 0L; var b = 1L; repeat(n) { val t = a + b; a = b; b = t }; return a }

@WasmExport fun sieveCount(n: Int): Int {
    val composite = BooleanArray(n + 1); var count = 0
    for (i in 2..n) if (!composite[i]) { count++; var j = i.toLong() * i; while (j <= n) { composite[j.toInt()] = true; j += i } }
    return count
}

@WasmExport fun listSum(n: Int): Long {
    val l = ArrayList<Long>()
    for (i in 0 until n) l.add(i.toLong() * i)
    return l.filter { it % 3L != 0L }.sum()
}

@WasmExport fun zoo(n: Int): Int {
    val animals = Array<Animal>(n) { if (it % 3 == 0) Bird(it % 5) else if (it % 3 == 1) Dog() else Animal(it % 7) }
    var s = 0
    for (a in animals) { s += a.weight(); if (a is Bird) s += a.wings }
    return s
}

@WasmExport fun stringHash(n: Int): Int {
    val sb = StringBuilder()
    for (i in 0 until n) sb.append(i).append(':')
    return sb.toString().hashCode()
}

@WasmExport fun mapCount(n: Int): Int {
    val m = HashMap<Int, Int>()
    for (i in 0 until n) { val k = (i * 31) % 97; m[k] = (m[k] ?: 0) + i }
    return m.size * 1000 + (m[5] ?: -1) % 1000
}

fun main() {}
