//! Stock itself: the per-product Redis locks ([`lock`]) that keep contention cheap, and the
//! read and conditional update ([`queries`]) that keep it correct. Deductions and reservations
//! use it; it knows neither.

pub mod lock;
pub mod queries;
