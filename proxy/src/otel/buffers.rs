//! Buffers of encoded spans, kept for the next batch instead of freed.
//!
//! A batch is a few megabytes (4,096 spans of about 700 bytes). Allocated afresh for
//! each batch, such a buffer came from pages the allocator had given back to the system
//! a second earlier: the request threads that filled it took a page fault every few
//! spans, and growing it from nothing copied it a dozen times on the way. Kept, it is
//! written into pages already there. Held buffers are dropped once a round of the
//! exporting thread finds no span, so an idle proxy keeps none, and those much larger
//! than the last second's largest request once a round has passed, so a burst's do not
//! stay with light traffic.

use std::sync::{Arc, Mutex, MutexGuard};

use bytes::Bytes;

/// Buffers this small are always kept: a trim frees only what a burst left.
const SMALL: usize = 64 * 1024;

/// Empty buffers ready for reuse, shared by the threads that fill and send them.
#[derive(Debug, Clone)]
pub struct Buffers {
    free: Arc<Mutex<Vec<Vec<u8>>>>,
    /// At most this many are kept; more are freed.
    keep: usize,
}

impl Buffers {
    pub fn new(keep: usize) -> Buffers {
        Buffers {
            free: Arc::default(),
            keep,
        }
    }

    fn free(&self) -> MutexGuard<'_, Vec<Vec<u8>>> {
        // A push or pop does not panic; a poisoned lock still holds good buffers.
        self.free
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// A kept buffer, or a new one of `capacity` when none is kept.
    pub fn take(&self, capacity: usize) -> Vec<u8> {
        self.free()
            .pop()
            .unwrap_or_else(|| Vec::with_capacity(capacity))
    }

    /// Keeps `buffer`, emptied, unless enough are kept already.
    pub fn give(&self, mut buffer: Vec<u8>) {
        if buffer.capacity() == 0 {
            return;
        }
        buffer.clear();
        let mut free = self.free();
        if free.len() < self.keep {
            free.push(buffer);
        }
    }

    /// Frees every kept buffer (nothing to send: the proxy is idle).
    pub fn release(&self) {
        self.free().clear();
    }

    /// Frees the kept buffers larger than `capacity` (and than a small batch's 64 KiB).
    pub fn trim(&self, capacity: usize) {
        let limit = capacity.max(SMALL);
        self.free().retain(|buffer| buffer.capacity() <= limit);
    }

    /// `buffer` as `Bytes` for an HTTP client, given back to these buffers when the
    /// client drops it.
    pub fn lend(&self, buffer: Vec<u8>) -> Bytes {
        Bytes::from_owner(Lent {
            buffer,
            home: self.clone(),
        })
    }

    #[cfg(test)]
    pub fn kept(&self) -> usize {
        self.free().len()
    }
}

/// A buffer lent as `Bytes`.
struct Lent {
    buffer: Vec<u8>,
    home: Buffers,
}

impl AsRef<[u8]> for Lent {
    fn as_ref(&self) -> &[u8] {
        &self.buffer
    }
}

impl Drop for Lent {
    fn drop(&mut self) {
        self.home.give(std::mem::take(&mut self.buffer));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_buffer_comes_back_empty_with_its_capacity() {
        let buffers = Buffers::new(2);
        let mut buffer = buffers.take(1024);
        buffer.extend_from_slice(&[1; 600]);
        let capacity = buffer.capacity();
        buffers.give(buffer);
        let again = buffers.take(0);
        assert!(again.is_empty());
        assert_eq!(again.capacity(), capacity);
    }

    #[test]
    fn at_most_keep_are_kept_and_release_frees_them() {
        let buffers = Buffers::new(2);
        for _ in 0..3 {
            buffers.give(Vec::with_capacity(64));
        }
        assert_eq!(buffers.kept(), 2);
        buffers.release();
        assert_eq!(buffers.kept(), 0);
    }

    #[test]
    fn a_trim_frees_only_buffers_past_the_capacity_and_a_small_batch() {
        let buffers = Buffers::new(4);
        for capacity in [1024, 100 * 1024, 4 * 1024 * 1024] {
            buffers.give(Vec::with_capacity(capacity));
        }
        buffers.trim(200 * 1024);
        assert_eq!(buffers.kept(), 2);
        buffers.trim(0);
        assert_eq!(buffers.kept(), 1, "a buffer under 64 KiB stays");
    }

    #[test]
    fn a_lent_buffer_returns_when_its_last_bytes_are_dropped() {
        let buffers = Buffers::new(2);
        let mut buffer = buffers.take(64);
        buffer.extend_from_slice(b"spans");
        let lent = buffers.lend(buffer);
        let copy = lent.clone();
        assert_eq!(&copy[..], b"spans");
        drop(lent);
        assert_eq!(buffers.kept(), 0, "still lent");
        drop(copy);
        assert_eq!(buffers.kept(), 1);
    }
}
