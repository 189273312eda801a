//! What order-service and inventory-service must agree on, and nothing more:
//! typed ids, the event contract, the reservation states inventory reports, the line-item rules, broker and Redis names, the problem+json
//! body, and the rule every client string passes.

pub mod events;
pub mod ids;
pub mod keys;
pub mod line_items;
pub mod problem;
pub mod reservation;
pub mod text;

pub use problem::Problem;
