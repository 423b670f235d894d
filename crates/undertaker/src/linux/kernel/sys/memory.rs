//! What an idle sentinel or guardian keeps resident: one of each lives as long as its
//! tree, so start-up's leftovers are paid per tree (docs/BENCHMARKS.md, "Memory per
//! tree").

/// Keeps an idle process's heap small: every thread allocates from the main heap
/// (glibc would give another thread an arena of its own, resident for the life of the
/// process), and freed memory goes back to the kernel: the C library's, and the
/// binary's own heap's ([`super::DlmallocHeap`]).
pub fn settle_heap() {
    super::heap::release_free();
    #[cfg(target_env = "gnu")]
    // SAFETY: mallopt sets one allocator parameter; malloc_trim releases free lists.
    unsafe {
        libc::mallopt(libc::M_ARENA_MAX, 1);
        libc::malloc_trim(0);
    }
}

/// Before the main thread idles: [`settle_heap`], [`settle_code`], and the stack
/// pages below the current frame go back to the kernel. Start-up (argument parsing,
/// set-up) ran deeper than the idle loop ever does; those pages hold nothing live, and
/// a later call that goes that deep again gets fresh zeroed pages. Only the main
/// thread's `[stack]`.
pub fn settle_idle() {
    let here = 0u8;
    let sp = std::hint::black_box(std::ptr::addr_of!(here)) as usize;
    // Read before the heap is trimmed: the reading allocates.
    let maps = std::fs::read_to_string("/proc/self/maps").unwrap_or_default();
    let stack = mapping_of(&maps, sp)
        .filter(|m| m.name == "[stack]")
        .map(|m| m.low);
    let code = code_mappings(&maps);
    drop(maps);
    settle_heap();
    for (low, high) in code {
        unmap_code(low, high);
    }
    if let Some(low) = stack {
        release_below_caller(low);
    }
}

/// The code pages this process touched (start-up, a healing look), its own and the
/// shared libraries', stay mapped, and counted in its PSS, though an idle loop runs a
/// few of them. Unmapping them leaves the pages in the page cache, shared and clean;
/// the next call maps what it runs again (a minor fault). Code only: never data, which
/// the loader may have written.
pub fn settle_code() {
    let maps = std::fs::read_to_string("/proc/self/maps").unwrap_or_default();
    for (low, high) in code_mappings(&maps) {
        unmap_code(low, high);
    }
}

/// The executable mappings of files (the program's code and its libraries').
fn code_mappings(maps: &str) -> Vec<(usize, usize)> {
    maps.lines()
        .filter_map(parse_line)
        .filter(|m| m.perms == "r-xp" && m.name.starts_with('/'))
        .map(|m| (m.low, m.high))
        .collect()
}

fn unmap_code(low: usize, high: usize) {
    // SAFETY: [low, high) is a private, read-only, executable file mapping that the
    // process never wrote: MADV_DONTNEED only drops its page table entries, and the
    // next access maps the same file pages again.
    unsafe {
        libc::madvise(low as *mut libc::c_void, high - low, libc::MADV_DONTNEED);
    }
}

/// Returns to the kernel the pages of the stack mapping that starts at `low` below
/// this call's frame: every caller's frame is above it (never inlined, so its local
/// marks where they end). The page of that local and the one below stay: this
/// function's own frame and madvise's live there.
#[inline(never)]
fn release_below_caller(low: usize) {
    let here = 0u8;
    let sp = std::hint::black_box(std::ptr::addr_of!(here)) as usize;
    let page = rustix::param::page_size();
    let keep_from = (sp & !(page - 1)).saturating_sub(page);
    if keep_from <= low {
        return;
    }
    // SAFETY: [low, keep_from) is the part of this thread's own stack mapping below
    // every live frame (the stack grows down from above `sp`); MADV_DONTNEED on
    // private anonymous memory only replaces those pages by zero-filled ones.
    unsafe {
        libc::madvise(
            low as *mut libc::c_void,
            keep_from - low,
            libc::MADV_DONTNEED,
        );
    }
}

/// One line of `/proc/self/maps`.
struct Mapping<'a> {
    low: usize,
    high: usize,
    perms: &'a str,
    name: &'a str,
}

/// The mapping in `maps` (`/proc/self/maps`) that holds `addr`.
fn mapping_of(maps: &str, addr: usize) -> Option<Mapping<'_>> {
    maps.lines()
        .filter_map(parse_line)
        .find(|m| m.low <= addr && addr < m.high)
}

fn parse_line(line: &str) -> Option<Mapping<'_>> {
    let mut fields = line.split_ascii_whitespace();
    let (low, high) = fields.next()?.split_once('-')?;
    let perms = fields.next()?;
    Some(Mapping {
        low: usize::from_str_radix(low, 16).ok()?,
        high: usize::from_str_radix(high, 16).ok()?,
        perms,
        // offset, device, inode, then the name (absent for anonymous memory).
        name: fields.nth(3).unwrap_or(""),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_mapping_that_holds_the_address_is_found() {
        let maps = "00400000-00479000 r-xp 00001000 fe:00 10125761   /usr/bin/undertaker\n\
                    55d0c0000000-55d0c0021000 rw-p 00000000 00:00 0          [heap]\n\
                    7f0000000000-7f0000001000 rw-p 00000000 00:00 0 \n\
                    7ffc01c6f000-7ffc01c90000 rw-p 00000000 00:00 0          [stack]\n";
        let m = mapping_of(maps, 0x7ffc01c8f980).unwrap();
        assert_eq!(
            (m.low, m.high, m.name),
            (0x7ffc01c6f000, 0x7ffc01c90000, "[stack]")
        );
        let m = mapping_of(maps, 0x400100).unwrap();
        assert_eq!((m.perms, m.name), ("r-xp", "/usr/bin/undertaker"));
        assert_eq!(mapping_of(maps, 0x7f0000000010).unwrap().name, "");
        assert!(mapping_of(maps, 0x7ffc01c90000).is_none());
    }

    #[test]
    fn the_code_goes_and_comes_back() {
        let maps = std::fs::read_to_string("/proc/self/maps").unwrap();
        let own = mapping_of(&maps, settle_code as *const () as usize).unwrap();
        assert!(code_mappings(&maps).contains(&(own.low, own.high)));
        assert!(code_mappings(&maps)
            .iter()
            .all(|&(low, _)| mapping_of(&maps, low).unwrap().perms == "r-xp"));
        settle_code();
        // This test runs on: the code it runs is mapped again.
        assert_eq!(std::hint::black_box(deep(8)), 8);
    }

    /// Resident KiB of the mapping starting at `low` (this process's smaps).
    fn rss_of(low: usize) -> u64 {
        let smaps = std::fs::read_to_string("/proc/self/smaps").unwrap();
        let head = format!("{low:x}-");
        let mut lines = smaps.lines().skip_while(|l| !l.starts_with(&head));
        lines
            .find_map(|l| l.strip_prefix("Rss:"))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
            .unwrap()
    }

    #[inline(never)]
    fn deep(n: u32) -> u32 {
        let pad = std::hint::black_box([n as u8; 1024]);
        if n == 0 {
            0
        } else {
            deep(n - 1) + u32::from(pad[0] != 0)
        }
    }

    #[test]
    fn the_stack_below_the_frame_goes_back_and_the_live_frames_stay() {
        // On this test's own thread (the main thread's `[stack]` is the harness's):
        // the same release, on the mapping that holds this frame.
        let canary = std::hint::black_box([7u8; 4096]);
        let here = 0u8;
        let sp = std::hint::black_box(std::ptr::addr_of!(here)) as usize;
        let maps = std::fs::read_to_string("/proc/self/maps").unwrap();
        let low = mapping_of(&maps, sp).unwrap().low;
        assert_eq!(deep(64), 64); // 64 KiB of frames below this one
        let before = rss_of(low);
        release_below_caller(low);
        let after = rss_of(low);
        assert!(after + 32 <= before, "{before} KiB -> {after} KiB");
        assert!(canary.iter().all(|&b| b == 7));
        assert_eq!(deep(64), 64);
    }
}
