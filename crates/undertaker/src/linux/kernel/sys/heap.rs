//! The heap the `undertaker` binary allocates from (its `#[global_allocator]`; the
//! library never imposes it): dlmalloc behind a lock, on memory it maps here. musl's
//! own allocator maps and unmaps page groups all through start-up, a page fault at
//! each first touch and a TLB flush at each unmap; dlmalloc keeps what it freed and
//! reuses it (docs/BENCHMARKS.md, "Issue 30, fourth round: the allocator"). What it
//! keeps goes back to the kernel when the process settles ([`release_free`], from
//! `settle_heap`), so an idle guardian or sentinel does not hold start-up's garbage.
//!
//! Its lock is not reset in a forked child: the crate forks only single-threaded
//! processes (sys/child.rs), and the child of a multi-threaded one (std's spawn, the
//! vfork-style clone3) allocates nothing before exec.
#![allow(unsafe_code)]

use std::alloc::{GlobalAlloc, Layout};
use std::ptr;
use std::sync::{Mutex, MutexGuard, PoisonError};

/// dlmalloc behind a lock (a guardian's self-healing look runs on threads of its
/// own). Declare it global in a binary: `#[global_allocator] static HEAP: DlmallocHeap
/// = DlmallocHeap;`.
pub struct DlmallocHeap;

/// dlmalloc's unit of mapping (its default).
const GRANULARITY: usize = 64 << 10;
const PAGE: usize = 4 << 10;

/// The heap's state (a dlmalloc instance, about 1 KiB) lives at the start of its first
/// mapping, not in the binary's data: there it would lengthen the data every process
/// of a tree dirties by that much, and cost a page wherever that crosses one
/// (docs/BENCHMARKS.md, "Issue 30, fourth round: the allocator"). Null until the
/// first allocation, or when its mapping failed.
static HEAP: Mutex<State> = Mutex::new(State(ptr::null_mut()));

struct State(*mut Dlmalloc);

type Dlmalloc = dlmalloc::Dlmalloc<Pages>;

// SAFETY: the state is reached only through the mutex that holds this pointer.
unsafe impl Send for State {}

/// The locked heap.
struct Locked(MutexGuard<'static, State>);

impl std::ops::Deref for Locked {
    type Target = Dlmalloc;
    fn deref(&self) -> &Dlmalloc {
        // SAFETY: non-null (checked in `heap`), initialised, and ours while locked.
        unsafe { &*self.0 .0 }
    }
}

impl std::ops::DerefMut for Locked {
    fn deref_mut(&mut self) -> &mut Dlmalloc {
        // SAFETY: as in `deref`.
        unsafe { &mut *self.0 .0 }
    }
}

/// The heap, locked, made at the first call; `None` when its first mapping failed.
fn heap() -> Option<Locked> {
    let mut state = lock();
    if state.0.is_null() {
        state.0 = first_mapping();
    }
    (!state.0.is_null()).then_some(Locked(state))
}

/// The heap, locked, if it was ever made (it never is where the binary's allocator is
/// not this one: a library user's process).
fn heap_in_use() -> Option<Locked> {
    let state = lock();
    (!state.0.is_null()).then_some(Locked(state))
}

fn lock() -> MutexGuard<'static, State> {
    // A panic never happens with the lock held (dlmalloc reports failure by null).
    HEAP.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Bytes at the start of the first mapping that hold the state.
const STATE_ROOM: usize = std::mem::size_of::<Dlmalloc>().next_multiple_of(64);

/// Maps the heap's first region, two units of mapping, and writes the state at its
/// start; the rest is dlmalloc's first segment (`Pages::spare`), so the state shares
/// its page with the first blocks. Null when the mapping fails.
fn first_mapping() -> *mut Dlmalloc {
    let size = 2 * GRANULARITY;
    let base = map(size);
    if base.is_null() {
        return ptr::null_mut();
    }
    let pages = Pages {
        closed: false,
        spare: std::cell::Cell::new((base as usize + STATE_ROOM, size - STATE_ROOM)),
    };
    let state = base.cast::<Dlmalloc>();
    // SAFETY: a fresh read-write mapping of `size` bytes, page-aligned, larger than
    // the state; nothing else points into it.
    unsafe { state.write(dlmalloc::Dlmalloc::new_with_allocator(pages)) };
    state
}

// SAFETY: every call goes to the one dlmalloc instance under its lock, with the
// layout the caller gives (GlobalAlloc's contract is dlmalloc's: a block is freed or
// resized with the size and alignment it was allocated with). Locking allocates
// nothing (a futex word), so the allocator never re-enters itself.
unsafe impl GlobalAlloc for DlmallocHeap {
    #[inline]
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        heap().map_or(ptr::null_mut(), |mut h| {
            h.malloc(layout.size(), layout.align())
        })
    }

    #[inline]
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        heap().map_or(ptr::null_mut(), |mut h| {
            h.calloc(layout.size(), layout.align())
        })
    }

    #[inline]
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // A block to free means the heap exists.
        if let Some(mut heap) = heap_in_use() {
            heap.free(ptr, layout.size(), layout.align())
        }
    }

    #[inline]
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        heap().map_or(ptr::null_mut(), |mut h| {
            h.realloc(ptr, layout.size(), layout.align(), new_size)
        })
    }
}

/// Returns the heap's free memory to the kernel: the top of the heap and every wholly
/// free segment are unmapped (trim), and the pages inside the free blocks between
/// live ones are dropped (`MADV_DONTNEED`: they stay mapped and come back zeroed when
/// reused). A settled process's live blocks are a few KiB scattered over start-up's
/// pages; trim alone leaves every page below the highest of them resident.
/// Nothing to do when the heap is not in use (a library user's process).
pub fn release_free() {
    let Some(mut heap) = heap_in_use() else {
        return;
    };
    // Trim releases whole units of the granularity: one page here, then back.
    heap.set_granularity(PAGE);
    // SAFETY: trim only unmaps memory no block lives in, under the lock.
    unsafe { heap.trim(0) };
    drop_free_pages(&mut heap);
    // SAFETY: as above; the blocks just freed may have joined the top.
    unsafe { heap.trim(0) };
    heap.set_granularity(GRANULARITY);
}

/// The sizes that take the free blocks out of the heap, largest first. A request is
/// served by the smallest free block that fits it, so after a size's round no free
/// block that large is left. Steps of 128 bytes up to 64 KiB: what is split off a
/// free block and left free is smaller than a step, so the block taken reaches the
/// page that the next block's header keeps resident anyway (the header of what is
/// left free would keep a page of its own). Down to a page and a quarter: a smaller
/// block holds no whole page. Some 500 requests that fail at once: microseconds.
fn take_sizes() -> impl Iterator<Item = usize> {
    const LARGE: [usize; 3] = [1024 << 10, 256 << 10, 128 << 10];
    let steps = (40..=512).rev().map(|n| n * 128);
    LARGE.into_iter().chain(steps)
}

/// dlmalloc has no call that lists its free blocks: with the mapping of new memory
/// refused, every free block of a page and a quarter or more is allocated
/// ([`take_sizes`]), its whole pages are dropped, and all of them are freed again.
fn drop_free_pages(heap: &mut Dlmalloc) {
    heap.allocator_mut().closed = true;
    // The blocks taken, linked through their first word.
    let mut taken: *mut u8 = ptr::null_mut();
    for size in take_sizes() {
        loop {
            // SAFETY: a plain allocation; null when no free block fits (mapping is
            // refused).
            let block = unsafe { heap.malloc(size, ALIGN) };
            if block.is_null() {
                break;
            }
            // SAFETY: the block is ours, `size` bytes, aligned for a pointer.
            unsafe { block.cast::<*mut u8>().write(taken) };
            taken = block;
            let low = (block as usize + std::mem::size_of::<usize>()).next_multiple_of(PAGE);
            let high = (block as usize + size) & !(PAGE - 1);
            if high > low {
                // SAFETY: [low, high) lies inside the block, which we own and whose
                // contents we discard; private anonymous memory reads back as zeros.
                unsafe { libc::madvise(low as *mut libc::c_void, high - low, libc::MADV_DONTNEED) };
            }
        }
    }
    heap.allocator_mut().closed = false;
    while !taken.is_null() {
        // SAFETY: the link written into the block when it was taken.
        let next = unsafe { taken.cast::<*mut u8>().read() };
        // SAFETY: allocated by this heap above; dlmalloc's free needs no size (the
        // size argument is only checked in its debug builds).
        unsafe { heap.c_free(taken) };
        taken = next;
    }
}

/// The alignment dlmalloc gives every block.
const ALIGN: usize = 2 * std::mem::size_of::<usize>();

/// A new private, anonymous, read-write mapping; null when it fails.
fn map(size: usize) -> *mut u8 {
    // SAFETY: a new mapping; no existing memory is touched.
    let addr = unsafe {
        libc::mmap(
            ptr::null_mut(),
            size,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
            -1,
            0,
        )
    };
    if addr == libc::MAP_FAILED {
        ptr::null_mut()
    } else {
        addr.cast()
    }
}

/// The memory dlmalloc carves blocks from: private anonymous mappings, the first of
/// them the rest of the state's own (`spare`, handed out once; the one segment
/// that does not start on a page, and is never unmapped whole).
/// `closed`: no new memory (while the free blocks are being taken out).
struct Pages {
    closed: bool,
    spare: std::cell::Cell<(usize, usize)>,
}

// SAFETY: the regions returned are fresh (or the unused rest of the state's mapping),
// private, anonymous and read-write, of at least the size asked; `free` and
// `free_part` unmap only what `alloc` handed out, never the state's page.
unsafe impl dlmalloc::Allocator for Pages {
    fn alloc(&self, size: usize) -> (*mut u8, usize, u32) {
        if self.closed {
            return (ptr::null_mut(), 0, 0);
        }
        let (spare, spare_size) = self.spare.get();
        if spare_size >= size {
            self.spare.set((0, 0));
            return (spare as *mut u8, spare_size, 0);
        }
        let addr = map(size);
        (addr, if addr.is_null() { 0 } else { size }, 0)
    }
    fn remap(&self, ptr: *mut u8, oldsize: usize, newsize: usize, can_move: bool) -> *mut u8 {
        let flags = if can_move { libc::MREMAP_MAYMOVE } else { 0 };
        // SAFETY: [ptr, ptr + oldsize) is a mapping `alloc` made (dlmalloc's contract).
        let addr = unsafe { libc::mremap(ptr.cast(), oldsize, newsize, flags) };
        if addr == libc::MAP_FAILED {
            ptr::null_mut()
        } else {
            addr.cast()
        }
    }

    fn free_part(&self, ptr: *mut u8, oldsize: usize, newsize: usize) -> bool {
        let (low, high) = (ptr as usize + newsize, ptr as usize + oldsize);
        if ptr as usize % PAGE != 0 {
            // The first segment: its mapping ends at `high`; the whole pages from `low`
            // go (the part of a page below them stays mapped, unused).
            let low = low.next_multiple_of(PAGE);
            // SAFETY: [low, high) is the end of the state's mapping, past the state,
            // holding no block (dlmalloc releases it).
            return low >= high
                || unsafe { libc::munmap(low as *mut libc::c_void, high - low) == 0 };
        }
        // SAFETY: as in `remap`; the part beyond `newsize` holds no block.
        unsafe { libc::mremap(ptr.cast(), oldsize, newsize, 0) != libc::MAP_FAILED }
    }

    fn free(&self, ptr: *mut u8, size: usize) -> bool {
        // The first segment never goes whole: the state lives just below it.
        // SAFETY: a whole mapping `alloc` made, holding no block.
        ptr as usize % PAGE == 0 && unsafe { libc::munmap(ptr.cast(), size) == 0 }
    }

    fn can_release_part(&self, _flags: u32) -> bool {
        true
    }

    fn allocates_zeros(&self) -> bool {
        true
    }

    fn page_size(&self) -> usize {
        PAGE
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Pages of [addr, addr + len) in memory (mincore).
    fn resident_pages(addr: *mut u8, len: usize) -> usize {
        let low = addr as usize & !(PAGE - 1);
        let pages = (addr as usize + len - low).div_ceil(PAGE);
        let mut vec = vec![0u8; pages];
        // SAFETY: [low, low + pages pages) is mapped (the heap's segment holds it);
        // mincore writes one byte per page into `vec`.
        let rc = unsafe { libc::mincore(low as *mut libc::c_void, pages * PAGE, vec.as_mut_ptr()) };
        assert_eq!(rc, 0, "mincore: {}", std::io::Error::last_os_error());
        vec.iter().filter(|&&b| b & 1 != 0).count()
    }

    #[test]
    fn a_settle_gives_back_the_pages_between_live_blocks_and_keeps_the_blocks() {
        // The test harness allocates from the system's allocator; this test alone uses
        // the heap, through its GlobalAlloc.
        let heap = DlmallocHeap;
        let small = Layout::from_size_align(64, 16).unwrap();
        let big = Layout::from_size_align(64 << 10, 16).unwrap();
        // SAFETY: blocks from this heap, used within their layouts, freed once.
        unsafe {
            let low = heap.alloc(small);
            let middle = heap.alloc(big);
            let high = heap.alloc(small);
            assert!(!low.is_null() && !middle.is_null() && !high.is_null());
            low.write_bytes(1, 64);
            middle.write_bytes(2, 64 << 10);
            high.write_bytes(3, 64);
            let before = resident_pages(middle, 64 << 10);
            heap.dealloc(middle, big);
            release_free();
            let after = resident_pages(middle, 64 << 10);
            // Trim alone keeps them all: a live block lies above.
            assert!(before >= 16 && after <= 2, "{before} pages -> {after}");
            assert!(std::slice::from_raw_parts(low, 64).iter().all(|&b| b == 1));
            assert!(std::slice::from_raw_parts(high, 64).iter().all(|&b| b == 3));
            // The heap goes on: the dropped pages come back zeroed when reused.
            let again = heap.alloc_zeroed(big);
            assert!(std::slice::from_raw_parts(again, 64 << 10)
                .iter()
                .all(|&b| b == 0));
            again.write_bytes(4, 64 << 10);
            heap.dealloc(again, big);
            heap.dealloc(low, small);
            heap.dealloc(high, small);
        }
    }
}
