//! [`Step`]: which end a hold is asked for. A leaf: the batches of deductions that carry ends
//! of holds, and the holds' own batches, both name it.

/// Which end a hold is asked for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Step {
    Confirm,
    Cancel,
}
