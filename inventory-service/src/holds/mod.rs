//! Holds (docs/contract.md §3.4): stock frozen for a caller — a checkout, a payment — until
//! it is confirmed, cancelled, or expires; the try / confirm / cancel of the TCC pattern, with
//! the barrier rules that make each step safe to repeat and to arrive out of order.
//!
//! - The try (`POST /holds`) is a deduction whose units go to `held` instead of being sold:
//!   it joins the group commit of `POST /deductions` ([`crate::deductions`]), judged by the
//!   same stock engine in the same batches, and recorded by the same statement.
//! - [`end`]: confirm and cancel, and what each answers. A hold this process took is ended in
//!   the next batch of its products, in the same statement as their tries and deductions
//!   ([`held_here`] remembers which products): no commit of its own, and a cancel's give-back
//!   keeps the stock that batch's leader remembers true. Any other end goes through
//!   [`batched`]: their group commit, one guarded statement ([`queries`]) for every confirm
//!   (or cancel) waiting;
//!   [`expiry`]: the sweep that expires holds past their deadline.
//! - [`view`]: how a hold is shown; [`routes`]: the four handlers.

pub mod batched;
pub mod end;
pub mod error;
pub mod expiry;
pub mod held_here;
pub mod queries;
pub mod routes;
pub mod step;
pub mod view;
