//! The payment window (docs/contract.md §3.1.1). With `ORDER_PAYMENT_WINDOW_SECS` set, a
//! reserved order waits `AWAITING_PAYMENT` until its `payment_due_at`: a confirm before then
//! makes it `CONFIRMED` ([`confirm`]); the expiry ([`expiry`]) makes one still waiting then
//! `EXPIRED` and gives its stock back, as a cancellation does. Both are guarded updates on
//! `status = 'AWAITING_PAYMENT'` of a locked row, so each order is decided once.

pub mod confirm;
pub mod expiry;
mod queries;
mod window;

pub use window::PaymentWindow;
