//! A read-only map of a file that other processes append to.
//!
//! The `unsafe` of the log: mapping a file (and a prefetch hint into the map). Rust assumes mapped bytes do
//! not change while borrowed, and a file can change or shrink under a map.
//! The log keeps both out of reach: the bytes it reads through the map are
//! committed records, which nobody rewrites (appends go past them, repair
//! writes new files and renames them in), and before each operation it
//! checks that the file is still at least as long as the map, so a file
//! truncated by someone else is an error on the next call, not a SIGBUS.
//! Records still being written are copied out and checked before use.

#![allow(unsafe_code)]

use std::fs::File;

use memmap2::Mmap;

pub struct Mapped {
    map: Option<Mmap>,
}

impl Mapped {
    pub fn empty() -> Self {
        Self { map: None }
    }

    /// Map the first `len` bytes of `file` (read-only).
    pub fn map(file: &File, len: u64) -> std::io::Result<Self> {
        if len == 0 {
            return Ok(Self::empty());
        }
        // SAFETY: see the module comment: only committed, never-rewritten
        // bytes are read in place, and the file's length is checked against
        // `len` before each operation.
        let map = unsafe { memmap2::MmapOptions::new().len(len as usize).map(file)? };
        Ok(Self { map: Some(map) })
    }

    pub fn len(&self) -> u64 {
        self.map.as_ref().map_or(0, |m| m.len() as u64)
    }

    pub fn bytes(&self) -> &[u8] {
        self.map.as_deref().unwrap_or(&[])
    }

    /// Ask the CPU to start loading the cache line at `offset` (nothing past
    /// the end). A sweep over a million headers waits on memory for each
    /// record, branchy as grouping is; fetching a few records ahead halves
    /// it (measured). A prefetch is a hint: it never faults and reads
    /// nothing into the program.
    #[inline]
    pub fn prefetch(&self, offset: usize) {
        #[cfg(target_arch = "x86_64")]
        if let Some(byte) = self.bytes().get(offset) {
            use std::arch::x86_64::{_MM_HINT_T0, _mm_prefetch};
            // SAFETY: a prefetch hint of an address inside the map; SSE is
            // part of the x86_64 baseline, so the instruction exists.
            unsafe { _mm_prefetch::<_MM_HINT_T0>(std::ptr::from_ref(byte).cast()) };
        }
        #[cfg(not(target_arch = "x86_64"))]
        let _ = offset;
    }
}
