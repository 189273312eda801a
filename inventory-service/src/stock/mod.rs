//! Stock itself: the engine ([`engine`]) whose rules every way of taking stock is judged by,
//! the per-product Redis locks ([`lock`]) that keep contention cheap, and the read and
//! conditional update ([`queries`]) that keep it correct. Deductions and reservations use
//! it; it knows neither.

pub mod engine;
pub mod lock;
pub mod queries;
