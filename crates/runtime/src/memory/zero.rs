//! The page kernels a reset runs: zeroing only the cache lines of a page that are not zero,
//! copying back only the lines that differ from an image, and telling a zero page.
//!
//! An instance that wrote a page often wrote a few of its lines, and the rest are still the
//! zeros the last reset left, in cache: reading every line and writing only the written ones
//! costs less than writing the whole page, and never writes a page that is all zeros (so never
//! copies the shared zero page on write, nor a file page that was only read). The AVX2 kernel
//! is chosen at run time; CPUs without it write the whole page instead (see
//! [`zero_written_lines`] for why, and BENCHMARKS.md).
//!
//! Invariant: every function here takes whole, page-aligned pages (or whole lines of one) that
//! the caller owns exclusively, and makes no system call.

/// A cache line, as words.
type Line = [u64; 8];

/// `page` (page-aligned) as cache lines.
fn lines(page: &mut [u8]) -> &mut [Line] {
    // SAFETY: any bytes are valid u64s, and any u64s valid bytes; `align_to_mut` hands back
    // whatever does not align, which a page-aligned page does not have.
    let (head, lines, tail) = unsafe { page.align_to_mut::<Line>() };
    assert!(
        head.is_empty() && tail.is_empty(),
        "not whole, aligned lines"
    );
    lines
}

/// Copies the cache lines of `src` that differ from `dst`'s (page-aligned, of one length): a
/// page of a private file mapping that was never written stays the file's (not copied on
/// write), and one written in a few lines is written in those.
pub(super) fn copy_differing_lines(dst: &mut [u8], src: &[u8]) {
    for (d, s) in dst.chunks_exact_mut(64).zip(src.chunks_exact(64)) {
        if d != s {
            d.copy_from_slice(s);
        }
    }
}

/// Whether a page-aligned page is all zeros (a reduction without early exit vectorises).
pub(super) fn is_zero(page: &[u8]) -> bool {
    // SAFETY: any bytes are valid u64s; `align_to` hands back whatever does not align.
    let (head, words, tail) = unsafe { page.align_to::<u64>() };
    // A written page usually shows it in its first word, which spares reading the rest.
    words.first().is_none_or(|&w| w == 0)
        && head.iter().chain(tail).all(|&b| b == 0)
        && words.iter().fold(0, |acc, &w| acc | w) == 0
}

/// Zeroes the cache lines of a page-aligned page that are not all zeros; whether there were
/// any.
///
/// Reading every line and writing only the written ones costs less than writing the whole
/// page (`memset`'s `rep stosb` of 4 KiB) where a few lines were written, and about the same
/// where every line was (BENCHMARKS.md).
///
/// Only with 32-byte vectors (AVX2): with 16-byte ones the reading costs more instructions
/// than `rep stosb` takes to write, and the whole page is written instead. 64-byte ones are no
/// faster here, and can lower the clock of older cores.
pub(super) fn zero_written_lines(page: &mut [u8]) -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        if std::arch::is_x86_feature_detected!("avx2") {
            // SAFETY: this CPU has AVX2.
            return unsafe { zero_written_lines_avx2(lines(page)) };
        }
    }
    zero_page_if_written(page)
}

/// [`zero_written_lines`] without wide vectors.
fn zero_page_if_written(page: &mut [u8]) -> bool {
    if is_zero(page) {
        return false;
    }
    page.fill(0);
    true
}

/// [`zero_written_lines`] with AVX2: a line is two 32-byte loads, tested at once.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
fn zero_written_lines_avx2(lines: &mut [Line]) -> bool {
    let mut any = false;
    for line in lines {
        if line.iter().fold(0, |acc, &w| acc | w) != 0 {
            *line = [0; 8];
            any = true;
        }
    }
    any
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pagemap::PAGE as HOST_PAGE;

    /// Every byte of every line, alone and with others, is found and zeroed, by both ways of
    /// zeroing a page; a zero page is reported untouched.
    #[test]
    fn zeroing_written_lines_leaves_only_zeros() {
        let zero: [fn(&mut [u8]) -> bool; 2] = [zero_written_lines, zero_page_if_written];
        let mut lines = vec![[0u64; 8]; HOST_PAGE / 64];
        // SAFETY: the lines' words as bytes (any bytes are valid u64s).
        let page =
            unsafe { std::slice::from_raw_parts_mut(lines.as_mut_ptr().cast::<u8>(), HOST_PAGE) };
        for zero in zero {
            assert!(!zero(page), "a zero page");
            for at in 0..HOST_PAGE {
                page[at] = 1 + (at % 255) as u8;
                // Another line too, some of the time.
                if at % 3 == 0 {
                    page[(at * 7 + 64) % HOST_PAGE] = 0xff;
                }
                assert!(zero(page), "byte {at}");
                assert!(page.iter().all(|&b| b == 0), "byte {at}");
            }
            page.fill(0xa5);
            assert!(zero(page), "every line");
            assert!(page.iter().all(|&b| b == 0));
            assert!(!zero(page), "zeroed again");
        }
    }
}
