//! `ORDER_PAYMENT_WINDOW_SECS`: how long a reserved order waits for its payment; 0, the
//! default, is off (a reserved order is `CONFIRMED` at once, as without the feature).

use std::time::Duration;

use platform::config as env;

use crate::orders::OrderStatus;

/// The window in force; each order keeps the one in force when it started to wait.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PaymentWindow(Option<Duration>);

impl PaymentWindow {
    /// A day: the contract's upper bound (docs/contract.md §3.1.1).
    pub const MAX_SECS: u64 = 86_400;
    pub const OFF: Self = Self(None);

    /// A window of `secs` seconds; 0 is off. [`PaymentWindow::from_env`] checks the range.
    pub fn from_secs(secs: u64) -> Self {
        Self((secs > 0).then(|| Duration::from_secs(secs)))
    }

    /// `ORDER_PAYMENT_WINDOW_SECS`, 0 to a day; anything else stops the start, naming it.
    pub fn from_env() -> anyhow::Result<Self> {
        env::within("ORDER_PAYMENT_WINDOW_SECS", 0, 0..=Self::MAX_SECS).map(Self::from_secs)
    }

    pub fn is_on(self) -> bool {
        self.0.is_some()
    }

    /// The window's length for SQL's `make_interval`; 0 when off (then no order waits).
    pub fn as_secs_f64(self) -> f64 {
        self.0.map_or(0.0, |window| window.as_secs_f64())
    }

    /// The window's length; zero when off.
    pub fn duration(self) -> Duration {
        self.0.unwrap_or_default()
    }

    /// What inventory's reservation makes of a `PENDING` order.
    pub fn reserved(self) -> OrderStatus {
        if self.is_on() {
            OrderStatus::AwaitingPayment
        } else {
            OrderStatus::Confirmed
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn zero_is_off_and_a_reservation_then_confirms_at_once() {
        assert_eq!(PaymentWindow::from_secs(0), PaymentWindow::OFF);
        assert_eq!(PaymentWindow::OFF.reserved(), OrderStatus::Confirmed);
        assert_eq!(PaymentWindow::OFF.as_secs_f64(), 0.0);
        let window = PaymentWindow::from_secs(900);
        assert!(window.is_on());
        assert_eq!(window.reserved(), OrderStatus::AwaitingPayment);
        assert_eq!(window.as_secs_f64(), 900.0);
    }
}
