//! Which products each hold this process took is on, so that its confirm or cancel can join
//! those products' batch ([`crate::deductions`]) instead of paying for a commit of its own.
//!
//! A routing hint, not a record: the database decides every end. The batch's statement changes
//! a hold only from `HELD`, only before its deadline for a confirm, and for a cancel only when
//! every unit of the hold is on the batch's products: an id remembered here may since have been
//! used again for other products, after its hold ended elsewhere and its row was deleted. A
//! hold is taken out of the map when its first confirm or cancel arrives here, so at most one
//! end of it ever rides in a batch; everything else — a hold another instance took, a second end, a hold this
//! process forgot (a restart, a full map) — goes the general way, `super::batched`.

use std::collections::HashMap;
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};
use shared::ids::ProductId;

/// The most holds remembered; past it, holds whose deadline passed are forgotten first (at
/// most once per [`PRUNE_EVERY`], so a map full of live holds is not scanned per insert), and
/// a hold that still does not fit is simply not remembered (its end goes the general way).
pub const CAPACITY: usize = 65_536;
pub const PRUNE_EVERY: Duration = Duration::from_secs(1);

/// A hold's products (its batch's key) and its deadline (after which nothing routes it).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Placed {
    pub products: Vec<ProductId>,
    pub expires_at: DateTime<Utc>,
}

/// The holds this process took and has not seen end. Cheap to share behind an `Arc`.
#[derive(Debug, Default)]
pub struct HeldHere {
    holds: Mutex<Holds>,
}

#[derive(Debug, Default)]
struct Holds {
    by_id: HashMap<String, Placed>,
    pruned_at: Option<Instant>,
}

impl HeldHere {
    /// Remembers holds a batch has just committed `HELD`.
    pub fn remember(&self, placed: impl IntoIterator<Item = (String, Placed)>) {
        let mut holds = self.holds();
        for (hold_id, hold) in placed {
            let full = holds.by_id.len() >= CAPACITY;
            if full && holds.pruned_at.is_none_or(|at| at.elapsed() >= PRUNE_EVERY) {
                let now = Utc::now();
                holds.by_id.retain(|_, hold| hold.expires_at > now);
                holds.pruned_at = Some(Instant::now());
            }
            if holds.by_id.len() < CAPACITY {
                holds.by_id.insert(hold_id, hold);
            }
        }
    }

    /// The products of `hold_id`, forgotten as they are returned: the one end that gets them
    /// rides in their batch; any other end of the same hold goes the general way.
    pub fn take(&self, hold_id: &str) -> Option<Vec<ProductId>> {
        self.holds().by_id.remove(hold_id).map(|hold| hold.products)
    }

    pub fn len(&self) -> usize {
        self.holds().by_id.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn holds(&self) -> std::sync::MutexGuard<'_, Holds> {
        // Nothing panics while holding the lock, and the map stays consistent if it did.
        self.holds.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

#[cfg(test)]
mod tests {
    use chrono::TimeDelta;

    use super::*;

    fn placed(product: i64, expires_in_secs: i64) -> Placed {
        Placed {
            products: vec![ProductId(product)],
            expires_at: Utc::now() + TimeDelta::seconds(expires_in_secs),
        }
    }

    #[test]
    fn a_hold_is_routed_once() {
        let here = HeldHere::default();
        here.remember([("h-1".to_owned(), placed(7, 60))]);
        assert_eq!(here.take("h-1"), Some(vec![ProductId(7)]));
        assert_eq!(here.take("h-1"), None, "a second end goes the general way");
        assert_eq!(here.take("h-2"), None, "never taken here");
    }

    #[test]
    fn when_full_holds_past_their_deadline_make_room_and_others_are_not_remembered() {
        let here = HeldHere::default();
        here.remember((0..CAPACITY).map(|i| {
            let expires_in = if i % 2 == 0 { -1 } else { 60 };
            (format!("h-{i}"), placed(1, expires_in))
        }));
        assert_eq!(here.len(), CAPACITY);
        here.remember([("late".to_owned(), placed(2, 60))]);
        assert_eq!(here.len(), CAPACITY / 2 + 1, "the due half was forgotten");
        assert_eq!(here.take("late"), Some(vec![ProductId(2)]));
        here.remember((0..CAPACITY).map(|i| (format!("more-{i}"), placed(3, 60))));
        assert_eq!(here.len(), CAPACITY, "never more than the capacity");
    }
}
