//! A global allocator that puts mid-size allocations on transparent huge pages.
//!
//! A model's weights, activation buffers and KV caches are mostly 64 KiB to a few MiB each:
//! too small for `kernels::hugepage`'s per-buffer advice (a huge page must lie inside one
//! 2 MiB-aligned range of one mapping) and large enough that glibc gives each its own 4 KiB-page
//! mapping. A decoder step that streams 10 MB of such weights and 4 MB of cache then touches
//! ~3,500 pages, more than the second-level TLB holds, and in a virtual machine every miss is a
//! two-level page walk: llama-tiny's weight GEMVs read at 30-35 GB/s with a 1023-entry cache and
//! 60-70 GB/s with a 128-entry one, though the 14 MB lay in L3 either way. This allocator serves
//! those sizes from 64 MiB regions advised for huge pages before their first touch, first fit
//! by address so that long-lived buffers pack together; smaller and larger requests go to the
//! system allocator unchanged (the largest get `kernels::hugepage`'s advice there).
//!
//! The binary installs it (`#[global_allocator]`); a library user may do the same. Memory
//! freed here is kept for reuse rather than returned to the OS, as runtimes' arenas do.

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;

/// Requests from this size up to `MAX_BYTES` are served from huge-page regions.
const MIN_BYTES: usize = 64 << 10;
const MAX_BYTES: usize = 32 << 20;
/// Spans are whole 4 KiB pages, so every address served is page-aligned.
const PAGE: usize = 4096;
const REGION_BYTES: usize = 64 << 20;
#[cfg(target_os = "linux")]
const HUGE_PAGE: usize = 2 << 20;
/// Fixed capacities: the allocator cannot allocate its own bookkeeping.
const MAX_REGIONS: usize = 256;
const MAX_SPANS: usize = 8192;

/// Free spans and the regions they lie in, by address. Pure bookkeeping over addresses: no
/// memory is read or written here, so it is tested with made-up addresses.
struct Spans {
    free_starts: [usize; MAX_SPANS],
    free_lens: [usize; MAX_SPANS],
    free_count: usize,
    regions: [(usize, usize); MAX_REGIONS],
    region_count: usize,
}

impl Spans {
    const fn new() -> Spans {
        Spans {
            free_starts: [0; MAX_SPANS],
            free_lens: [0; MAX_SPANS],
            free_count: 0,
            regions: [(0, 0); MAX_REGIONS],
            region_count: 0,
        }
    }

    /// Adopts a new region, all free. False when the region table is full.
    fn add_region(&mut self, start: usize, len: usize) -> bool {
        if self.region_count == MAX_REGIONS {
            return false;
        }
        self.regions[self.region_count] = (start, len);
        self.region_count += 1;
        self.give(start, len);
        true
    }

    fn owns(&self, address: usize) -> bool {
        self.regions[..self.region_count]
            .iter()
            .any(|&(start, len)| address >= start && address < start + len)
    }

    /// The lowest free span of at least `len` bytes, carved from its start.
    fn take(&mut self, len: usize) -> Option<usize> {
        let index = self.free_lens[..self.free_count]
            .iter()
            .position(|&free| free >= len)?;
        let start = self.free_starts[index];
        if self.free_lens[index] == len {
            self.remove(index);
        } else {
            self.free_starts[index] += len;
            self.free_lens[index] -= len;
        }
        Some(start)
    }

    /// Returns `[start, start + len)` to the free list, merged with free neighbours. A span
    /// that neither merges nor fits the table is dropped (leaked): rare, and never unsafe.
    fn give(&mut self, start: usize, len: usize) {
        let count = self.free_count;
        let index = self.free_starts[..count].partition_point(|&s| s < start);
        let joins_previous =
            index > 0 && self.free_starts[index - 1] + self.free_lens[index - 1] == start;
        let joins_next = index < count && start + len == self.free_starts[index];
        match (joins_previous, joins_next) {
            (true, true) => {
                self.free_lens[index - 1] += len + self.free_lens[index];
                self.remove(index);
            }
            (true, false) => self.free_lens[index - 1] += len,
            (false, true) => {
                self.free_starts[index] = start;
                self.free_lens[index] += len;
            }
            (false, false) => {
                if count == MAX_SPANS {
                    return;
                }
                self.free_starts.copy_within(index..count, index + 1);
                self.free_lens.copy_within(index..count, index + 1);
                self.free_starts[index] = start;
                self.free_lens[index] = len;
                self.free_count += 1;
            }
        }
    }

    fn remove(&mut self, index: usize) {
        let count = self.free_count;
        self.free_starts.copy_within(index + 1..count, index);
        self.free_lens.copy_within(index + 1..count, index);
        self.free_count -= 1;
    }
}

static SPANS: Mutex<Spans> = Mutex::new(Spans::new());

fn spans() -> std::sync::MutexGuard<'static, Spans> {
    // Nothing panics while the lock is held; a poisoned lock still holds consistent spans.
    SPANS
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// Off: new requests all go to the system allocator (blocks already served stay ours).
static ENABLED: AtomicBool = AtomicBool::new(true);

/// Sends every later request to the system allocator: the escape hatch
/// (`ROOFLINE_HEAP=system`) and the A/B switch for measuring what the heap buys.
pub fn disable() {
    ENABLED.store(false, Ordering::Relaxed);
}

/// Whether a block of `layout` may be one of ours (page alignment at most).
fn serves(layout: Layout) -> bool {
    cfg!(target_os = "linux")
        && (MIN_BYTES..=MAX_BYTES).contains(&layout.size())
        && layout.align() <= PAGE
}

fn span_len(size: usize) -> usize {
    size.div_ceil(PAGE) * PAGE
}

/// Maps a 2 MiB-aligned region of at least `len` bytes advised for huge pages, or None.
#[cfg(target_os = "linux")]
fn map_region(len: usize) -> Option<(usize, usize)> {
    let len = len.div_ceil(HUGE_PAGE) * HUGE_PAGE;
    let padded = len + HUGE_PAGE;
    // SAFETY: an anonymous private mapping at an address the kernel chooses; the unaligned
    // head and tail are unmapped again, so only [start, start + len) stays mapped.
    unsafe {
        let base = libc::mmap(
            std::ptr::null_mut(),
            padded,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
            -1,
            0,
        );
        if base == libc::MAP_FAILED {
            return None;
        }
        let base = base as usize;
        let start = base.div_ceil(HUGE_PAGE) * HUGE_PAGE;
        if start > base {
            libc::munmap(base as *mut libc::c_void, start - base);
        }
        let end = start + len;
        if base + padded > end {
            libc::munmap(end as *mut libc::c_void, base + padded - end);
        }
        // Advisory: with THP off the region simply stays on 4 KiB pages.
        libc::madvise(start as *mut libc::c_void, len, libc::MADV_HUGEPAGE);
        Some((start, len))
    }
}

#[cfg(not(target_os = "linux"))]
fn map_region(_len: usize) -> Option<(usize, usize)> {
    None
}

/// Serves 64 KiB-32 MiB requests from huge-page regions, the rest from [`System`].
pub struct HugePageHeap;

impl HugePageHeap {
    fn take(len: usize) -> Option<*mut u8> {
        let mut spans = spans();
        if let Some(start) = spans.take(len) {
            return Some(start as *mut u8);
        }
        let (start, region_len) = map_region(len.max(REGION_BYTES))?;
        if !spans.add_region(start, region_len) {
            drop(spans);
            // SAFETY: the region was mapped just above and nothing points into it.
            #[cfg(target_os = "linux")]
            unsafe {
                libc::munmap(start as *mut libc::c_void, region_len);
            }
            return None;
        }
        spans.take(len).map(|start| start as *mut u8)
    }
}

// SAFETY: every pointer returned is either System's (and goes back to System: `owns` tells the
// two apart exactly, by address range) or the start of a free span of at least the requested
// size, page-aligned, which no other live allocation overlaps until it is given back.
unsafe impl GlobalAlloc for HugePageHeap {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        if serves(layout) && ENABLED.load(Ordering::Relaxed) {
            if let Some(ptr) = Self::take(span_len(layout.size())) {
                return ptr;
            }
        }
        System.alloc(layout)
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        if !serves(layout) || !ENABLED.load(Ordering::Relaxed) {
            return System.alloc_zeroed(layout);
        }
        let ptr = self.alloc(layout);
        if !ptr.is_null() {
            // A reused span holds old data.
            std::ptr::write_bytes(ptr, 0, layout.size());
        }
        ptr
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        if serves(layout) {
            let mut spans = spans();
            if spans.owns(ptr as usize) {
                spans.give(ptr as usize, span_len(layout.size()));
                return;
            }
        }
        System.dealloc(ptr, layout)
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        let new_layout = Layout::from_size_align_unchecked(new_size, layout.align());
        let ours = serves(layout) && spans().owns(ptr as usize);
        if !ours && !serves(new_layout) {
            // glibc grows its large blocks with mremap, without copying.
            return System.realloc(ptr, layout, new_size);
        }
        if ours && serves(new_layout) && span_len(new_size) == span_len(layout.size()) {
            return ptr;
        }
        let new_ptr = self.alloc(new_layout);
        if !new_ptr.is_null() {
            std::ptr::copy_nonoverlapping(ptr, new_ptr, layout.size().min(new_size));
            self.dealloc(ptr, layout);
        }
        new_ptr
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MB: usize = 1 << 20;

    fn region() -> Box<Spans> {
        let mut spans = Box::new(Spans::new());
        assert!(spans.add_region(64 * MB, 64 * MB));
        spans
    }

    #[test]
    fn spans_are_carved_first_fit_by_address() {
        let mut spans = region();
        let a = spans.take(MB).unwrap();
        let b = spans.take(2 * MB).unwrap();
        let c = spans.take(MB).unwrap();
        assert_eq!((a, b, c), (64 * MB, 65 * MB, 67 * MB));
        // A hole the next request fits is reused before the untouched tail.
        spans.give(b, 2 * MB);
        assert_eq!(spans.take(MB), Some(65 * MB));
        assert_eq!(spans.take(2 * MB), Some(68 * MB));
        assert!(spans.owns(a) && spans.owns(127 * MB) && !spans.owns(128 * MB));
        assert!(spans.take(64 * MB).is_none());
    }

    #[test]
    fn freed_neighbours_merge_back_into_one_span() {
        let mut spans = region();
        let blocks: Vec<usize> = (0..4).map(|_| spans.take(MB).unwrap()).collect();
        // Free out of order: every merge case (previous, next, both, neither) happens.
        for &i in &[1, 3, 2, 0] {
            spans.give(blocks[i], MB);
        }
        assert_eq!(spans.free_count, 1);
        assert_eq!(
            (spans.free_starts[0], spans.free_lens[0]),
            (64 * MB, 64 * MB)
        );
        assert_eq!(spans.take(64 * MB), Some(64 * MB));
    }

    #[test]
    fn a_full_free_table_leaks_rather_than_corrupts() {
        let mut spans = Box::new(Spans::new());
        assert!(spans.add_region(64 * MB, 128 * MB));
        // Alternate live and freed pages until the table is full: every freed page is a span.
        let pages: Vec<usize> = (0..2 * MAX_SPANS + 2)
            .map(|_| spans.take(PAGE).unwrap())
            .collect();
        for page in pages.iter().step_by(2) {
            spans.give(*page, PAGE);
        }
        assert_eq!(spans.free_count, MAX_SPANS);
        // Spans stay sorted and disjoint.
        let free = &spans.free_starts[..spans.free_count];
        assert!(free.windows(2).all(|w| w[0] + PAGE <= w[1]));
    }

    /// Through the allocator itself (not installed globally here): sizes either side of the
    /// range, contents kept across realloc, every block distinct.
    #[test]
    fn the_allocator_serves_and_frees_blocks_of_every_size() {
        let heap = HugePageHeap;
        let sizes = [
            100,
            MIN_BYTES - 1,
            MIN_BYTES,
            700 << 10,
            5 * MB,
            MAX_BYTES,
            MAX_BYTES + 1,
        ];
        let mut blocks = Vec::new();
        for (i, &size) in sizes.iter().enumerate() {
            let layout = Layout::from_size_align(size, 64).unwrap();
            // SAFETY: a non-zero size; the block is written within its size and freed below.
            unsafe {
                let ptr = heap.alloc(layout);
                assert!(!ptr.is_null() && (ptr as usize).is_multiple_of(64));
                std::ptr::write_bytes(ptr, i as u8 + 1, size);
                blocks.push((ptr, layout));
            }
        }
        for (i, &(ptr, layout)) in blocks.iter().enumerate() {
            // SAFETY: each block is live and `layout.size()` long.
            let bytes = unsafe { std::slice::from_raw_parts(ptr, layout.size()) };
            assert!(
                bytes.iter().all(|&b| b == i as u8 + 1),
                "block {i} overwritten"
            );
        }
        for (i, (ptr, layout)) in blocks.into_iter().enumerate() {
            // SAFETY: grow then free each live block once, with the layout it was made with.
            unsafe {
                let grown = heap.realloc(ptr, layout, layout.size() * 2);
                assert!(!grown.is_null());
                let kept = std::slice::from_raw_parts(grown, layout.size());
                assert!(
                    kept.iter().all(|&b| b == i as u8 + 1),
                    "realloc lost block {i}"
                );
                heap.dealloc(
                    grown,
                    Layout::from_size_align(layout.size() * 2, 64).unwrap(),
                );
            }
        }
        let zeroed_layout = Layout::from_size_align(MB, 8).unwrap();
        // SAFETY: a live block read within its size, then freed.
        unsafe {
            let ptr = heap.alloc_zeroed(zeroed_layout);
            assert!(std::slice::from_raw_parts(ptr, MB).iter().all(|&b| b == 0));
            heap.dealloc(ptr, zeroed_layout);
        }
    }
}
