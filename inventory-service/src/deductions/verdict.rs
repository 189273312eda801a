//! [`Verdict`]: what one request of a batch got. A leaf: the attempt that decides it and the
//! response that words it both name it.

use super::queries::StoredDeduction;

/// What one request of a batch got.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// The first request with its id: its outcome was recorded now, and is answered.
    First(StoredDeduction),
    /// Repeats, with the same items, an id first used earlier in the same batch.
    Same(StoredDeduction),
    /// Its id was recorded before this batch, with the same items.
    Stored(StoredDeduction),
    /// Its id was used before (stored, or earlier in this batch) with other items.
    Reused,
    /// A hold's try that came after its cancel (a tombstone).
    Cancelled,
}
