//! What takes stock synchronously — `deductions` (the first outcome of every deduction id)
//! and `holds` (every hold, with its try's first outcome) — and the two steps a batch of them
//! costs: [`read`], the stock of its products with the stored outcomes of its ids, and
//! [`record`], the stock change with the new outcomes and the ends of holds, all or nothing.
//! The MySQL forms of `inventory_service::deductions::queries`.

mod read;
mod record;

pub use read::{IdKind, Read, StoredRow, read};
pub use record::{NewDeduction, NewHold, Outcomes, Recorded, record};
