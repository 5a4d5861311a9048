//! Large f32 buffers backed by transparent huge pages where the kernel offers them.
//!
//! The executor's weights and activation buffers are ordinary heap vectors. With 4 KiB pages a
//! GEMV streaming weights from DRAM takes a TLB miss every 4 KiB, and in a virtual machine each
//! miss is a two-level page walk: on a KVM guest a 4096×4096 MatMul GEMV read its weights at
//! 12 GB/s against the 29.5 GB/s the probe's (huge-page) read kernel reached in the same session.
//! Linux's default THP mode, `madvise`, gives huge pages only to ranges that ask before their
//! pages are first touched; these constructors ask, then fill. Buffers under 4 MiB get their
//! huge pages from `crate::heap` instead, where the binary installs it.

/// Buffers smaller than this stay on ordinary pages (a huge page would be mostly empty).
const MIN_BYTES: usize = 4 << 20;
#[cfg(target_os = "linux")]
const HUGE_PAGE: usize = 2 << 20;

/// Offers the 2 MiB-aligned interior of `buffer`'s allocation to transparent huge pages.
fn advise(buffer: &mut Vec<f32>) {
    let bytes = buffer.capacity() * std::mem::size_of::<f32>();
    if bytes < MIN_BYTES {
        return;
    }
    #[cfg(target_os = "linux")]
    {
        let start = buffer.as_mut_ptr() as usize;
        let aligned = start.div_ceil(HUGE_PAGE) * HUGE_PAGE;
        let end = (start + bytes) / HUGE_PAGE * HUGE_PAGE;
        if end > aligned {
            // Advisory only: with THP off the call fails and nothing changes.
            // SAFETY: the range lies inside the vector's own allocation, which is not yet
            // touched past its length (0); madvise does not change its contents.
            unsafe {
                libc::madvise(
                    aligned as *mut libc::c_void,
                    end - aligned,
                    libc::MADV_HUGEPAGE,
                );
            }
        }
    }
}

/// `values` moved to huge-page-backed memory when large enough to benefit (one copy, at plan
/// time), returned as they are otherwise.
pub fn adopt(values: Vec<f32>) -> Vec<f32> {
    if values.len() * std::mem::size_of::<f32>() < MIN_BYTES {
        return values;
    }
    copy_of(&values)
}

/// A copy of `values` in huge-page-backed memory (when large enough).
pub fn copy_of(values: &[f32]) -> Vec<f32> {
    let mut buffer = Vec::with_capacity(values.len());
    advise(&mut buffer);
    buffer.extend_from_slice(values);
    buffer
}

/// `len` zeros in huge-page-backed memory (when large enough).
pub fn zeroed(len: usize) -> Vec<f32> {
    filled(len, 0.0)
}

/// `len` copies of `value` in huge-page-backed memory (when large enough).
pub fn filled(len: usize, value: f32) -> Vec<f32> {
    let mut buffer = Vec::with_capacity(len);
    advise(&mut buffer);
    buffer.resize(len, value);
    buffer
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn contents_are_exact_whatever_the_size() {
        for len in [0, 3, 1 << 20, (3 << 20) + 5] {
            let values: Vec<f32> = (0..len).map(|i| i as f32 * 0.5).collect();
            assert_eq!(copy_of(&values), values);
            assert!(zeroed(len).iter().all(|&v| v == 0.0));
            assert_eq!(zeroed(len).len(), len);
            assert!(filled(len, 2.5).iter().all(|&v| v == 2.5));
        }
    }
}
