//! Page-aligned, pre-faulted measurement buffers.
//!
//! Bandwidth kernels need aligned arrays (aligned vector loads, non-temporal stores) whose
//! pages already exist, so the first timed pass does not measure page faults. Large buffers
//! are aligned to 2 MiB and offered to transparent huge pages, which cuts TLB misses in the
//! DRAM sweep the way a tuned STREAM build does.

use std::alloc::{alloc, dealloc, Layout};
use std::ptr::NonNull;

use super::ProbeError;

const HUGE_PAGE: usize = 2 * 1024 * 1024;

/// An owned, aligned byte buffer.
pub struct AlignedBuffer {
    ptr: NonNull<u8>,
    layout: Layout,
    /// Bytes from the start already written by `prefault`.
    faulted: usize,
}

// SAFETY: the buffer owns its allocation exclusively, like a Vec<u8>; access goes through
// `&mut self` (or through the pointer handed to a kernel while `&mut self` is held).
unsafe impl Send for AlignedBuffer {}

impl AlignedBuffer {
    /// Allocates `bytes` (at least one page). Pages are not touched: call `prefault` from the
    /// thread that will use the buffer, so first-touch places them on its NUMA node.
    pub fn new(bytes: usize) -> Result<AlignedBuffer, ProbeError> {
        let bytes = bytes.max(4096);
        let align = if bytes >= 2 * HUGE_PAGE {
            HUGE_PAGE
        } else {
            4096
        };
        let size = bytes.div_ceil(align) * align;
        let layout =
            Layout::from_size_align(size, align).map_err(|_| ProbeError::Alloc { bytes: size })?;
        // SAFETY: the layout has a non-zero size.
        let raw = unsafe { alloc(layout) };
        let ptr = NonNull::new(raw).ok_or(ProbeError::Alloc { bytes: size })?;
        #[cfg(target_os = "linux")]
        if align == HUGE_PAGE {
            // Advisory only: when THP is off or in "never" mode the call fails harmlessly.
            // SAFETY: the range is exactly the allocation just made.
            unsafe {
                libc::madvise(ptr.as_ptr().cast(), size, libc::MADV_HUGEPAGE);
            }
        }
        Ok(AlignedBuffer {
            ptr,
            layout,
            faulted: 0,
        })
    }

    /// Writes every byte, so every page is mapped. The pattern 0x3f makes every aligned f64 in
    /// the buffer 4.8e-4: a normal number, so FP kernels never meet subnormals.
    #[cfg(test)]
    pub fn prefault(&mut self) {
        self.prefault_prefix(self.layout.size());
    }

    /// Like `prefault` for the first `bytes` only (bytes already written are skipped), so a
    /// large buffer costs page faults only for the part a sweep reaches.
    pub fn prefault_prefix(&mut self, bytes: usize) {
        let end = bytes.min(self.layout.size());
        if end <= self.faulted {
            return;
        }
        // SAFETY: writes bytes faulted..end, inside the allocation.
        unsafe {
            std::ptr::write_bytes(
                self.ptr.as_ptr().add(self.faulted),
                0x3f,
                end - self.faulted,
            )
        };
        self.faulted = end;
    }

    /// Bytes already pre-faulted from the start.
    pub fn faulted(&self) -> usize {
        self.faulted
    }

    pub fn as_mut_ptr(&mut self) -> *mut u8 {
        self.ptr.as_ptr()
    }
}

impl Drop for AlignedBuffer {
    fn drop(&mut self) {
        // SAFETY: allocated in `new` with this layout and not freed elsewhere.
        unsafe { dealloc(self.ptr.as_ptr(), self.layout) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buffers_are_aligned_and_writable() {
        for bytes in [1, 4096, 5000, 5 * 1024 * 1024] {
            let mut buffer = AlignedBuffer::new(bytes).expect("allocates");
            buffer.prefault();
            assert!(buffer.faulted() >= bytes);
            assert_eq!(buffer.as_mut_ptr() as usize % 4096, 0);
        }
    }
}
