//! Cache-line aligned f32 buffers and per-thread scratch for packing.
//!
//! Scratch lives in thread-locals so repeated GEMM calls neither allocate nor fault pages. A
//! slot is *taken* for the duration of a use and put back after, so a nested use on the same
//! thread (a task that itself calls a kernel) gets a fresh buffer instead of a
//! borrow conflict.

use std::cell::Cell;
use std::thread::LocalKey;

#[derive(Clone, Copy)]
#[repr(C, align(64))]
struct Line([f32; 16]);

/// A growable f32 buffer whose start is 64-byte aligned.
#[derive(Default)]
pub(crate) struct AlignedBuf {
    lines: Vec<Line>,
}

impl AlignedBuf {
    /// A zeroed buffer of at least `len` floats.
    pub fn zeroed(len: usize) -> Self {
        AlignedBuf {
            lines: vec![Line([0.0; 16]); len.div_ceil(16)],
        }
    }

    pub fn capacity(&self) -> usize {
        self.lines.len() * 16
    }

    /// Grows (discarding the contents) to hold `len` floats.
    pub fn reserve(&mut self, len: usize) {
        if self.capacity() < len {
            *self = AlignedBuf::zeroed(len);
        }
    }

    pub fn as_slice(&self) -> &[f32] {
        // SAFETY: `Line` is `repr(C)` over `[f32; 16]`, so the lines are contiguous floats.
        unsafe { std::slice::from_raw_parts(self.lines.as_ptr() as *const f32, self.capacity()) }
    }

    pub fn as_mut_slice(&mut self) -> &mut [f32] {
        // SAFETY: as above, and `&mut self` makes the borrow unique.
        unsafe {
            std::slice::from_raw_parts_mut(self.lines.as_mut_ptr() as *mut f32, self.capacity())
        }
    }
}

pub(crate) type Slot = LocalKey<Cell<Option<AlignedBuf>>>;

thread_local! {
    /// A blocks packed by a task.
    pub(crate) static SCRATCH_A: Cell<Option<AlignedBuf>> = const { Cell::new(None) };
    /// B blocks packed by a task.
    pub(crate) static SCRATCH_B: Cell<Option<AlignedBuf>> = const { Cell::new(None) };
    /// A whole operand packed up front for a multi-threaded call (held by the calling thread).
    pub(crate) static SCRATCH_WHOLE: Cell<Option<AlignedBuf>> = const { Cell::new(None) };
}

/// Scratch larger than this is freed after use instead of being kept by the thread.
const KEEP_MAX_FLOATS: usize = 16 << 20;

/// Runs `f` with at least `len` floats of this thread's scratch from `slot`.
pub(crate) fn with_scratch<R>(
    slot: &'static Slot,
    len: usize,
    f: impl FnOnce(&mut AlignedBuf) -> R,
) -> R {
    let mut buf = slot.with(|c| c.take()).unwrap_or_default();
    buf.reserve(len);
    let r = f(&mut buf);
    if buf.capacity() <= KEEP_MAX_FLOATS {
        slot.with(|c| {
            let prev = c.take();
            // Keep the larger of the two if a nested use put one back meanwhile.
            let keep = match prev {
                Some(p) if p.capacity() >= buf.capacity() => p,
                _ => buf,
            };
            c.set(Some(keep));
        });
    }
    r
}
