//! The service's own metrics (docs/contract.md §5): stock locks and deductions. Names are part of the
//! contract; [`register`] exposes every one of them at zero from start.

use std::time::Duration;

use platform::telemetry::metrics::zero_counter;

/// `lock_acquisitions_total{result}`: one per acquisition of the locks a deduction needs
/// (`acquired`, `timeout`, `bypassed` when Redis was unreachable), plus one `lost` per
/// holder that learned its locks were lost before commit.
pub const LOCK_ACQUISITIONS_TOTAL: &str = "lock_acquisitions_total";
/// `lock_wait_seconds`: time spent acquiring locks, successful or timed out.
pub const LOCK_WAIT_SECONDS: &str = "lock_wait_seconds";
/// `lock_renewals_total`: lock keys renewed by the watchdog.
pub const LOCK_RENEWALS_TOTAL: &str = "lock_renewals_total";
/// `deduction_version_conflicts_total`: deduction batches undone because another writer got
/// in first (an id of the batch recorded meanwhile, a row not as read), then retried.
pub const DEDUCTION_VERSION_CONFLICTS_TOTAL: &str = "deduction_version_conflicts_total";
/// `deductions_total{result}`: `POST /deductions` outcomes: `applied`, `insufficient_stock`,
/// `unknown_product`, `replayed`.
pub const DEDUCTIONS_TOTAL: &str = "deductions_total";

/// Outcome label of [`LOCK_ACQUISITIONS_TOTAL`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LockResult {
    Acquired,
    Timeout,
}

/// Installs the recorder (once per process) and registers every metric at zero.
pub fn register() {
    platform::telemetry::metrics::handle();
    platform::messaging::relay::register_metrics();
    platform::messaging::consumer::register_metrics();
    metrics::describe_counter!(
        LOCK_ACQUISITIONS_TOTAL,
        "Stock lock acquisitions, by result: acquired, timeout, lost, bypassed"
    );
    metrics::describe_histogram!(
        LOCK_WAIT_SECONDS,
        metrics::Unit::Seconds,
        "Time spent acquiring stock locks"
    );
    metrics::describe_counter!(LOCK_RENEWALS_TOTAL, "Stock lock keys renewed while held");
    metrics::describe_counter!(
        DEDUCTION_VERSION_CONFLICTS_TOTAL,
        "Conditional stock updates that lost a race and were retried"
    );
    metrics::describe_counter!(
        DEDUCTIONS_TOTAL,
        "Direct deductions (POST /deductions), by result"
    );
    zero_counter(
        LOCK_ACQUISITIONS_TOTAL,
        "result",
        &["acquired", "timeout", "lost", "bypassed"],
    );
    zero_counter(LOCK_RENEWALS_TOTAL, "", &[]);
    zero_counter(DEDUCTION_VERSION_CONFLICTS_TOTAL, "", &[]);
    zero_counter(
        DEDUCTIONS_TOTAL,
        "result",
        &[
            "applied",
            "insufficient_stock",
            "unknown_product",
            "replayed",
        ],
    );
    // Registering the histogram's handle is enough for the exporter to render it with
    // empty buckets.
    let _registered = metrics::histogram!(LOCK_WAIT_SECONDS);
}

pub fn lock_acquired(result: LockResult, waited: Duration) {
    let label = match result {
        LockResult::Acquired => "acquired",
        LockResult::Timeout => "timeout",
    };
    metrics::counter!(LOCK_ACQUISITIONS_TOTAL, "result" => label).increment(1);
    metrics::histogram!(LOCK_WAIT_SECONDS).record(waited.as_secs_f64());
}

pub fn lock_bypassed() {
    metrics::counter!(LOCK_ACQUISITIONS_TOTAL, "result" => "bypassed").increment(1);
}

pub fn lock_lost() {
    metrics::counter!(LOCK_ACQUISITIONS_TOTAL, "result" => "lost").increment(1);
}

pub fn lock_renewed() {
    metrics::counter!(LOCK_RENEWALS_TOTAL).increment(1);
}

pub fn version_conflict() {
    metrics::counter!(DEDUCTION_VERSION_CONFLICTS_TOTAL).increment(1);
}

pub fn deduction(result: &'static str) {
    metrics::counter!(DEDUCTIONS_TOTAL, "result" => result).increment(1);
}
